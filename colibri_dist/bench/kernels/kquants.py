"""`python -m colibri_dist.bench kquants`: llama.cpp block matmuls, the f32-decoder path vs the integer path vs ggml.

Role: ms per matmul of one q4_k / q6_k (or q4_k_r8, q6_k_r16, q5_k, q8_0, mxfp4, iq4_xs, iq4_nl, q5_1) matrix by
1, 4 and 32 tokens at 1 and 2 threads, on the shapes that matter (2048 x 2048, and Qwen3-30B-A3B's expert matrices:
768 x 2048 gate/up, 2048 x 768 down), for colibri's two paths: "decode" (w8a8 off: blocks decoded to f32, fma against f32 activations)
and "q8k" (w8a8 on: the activations quantized to the type's llama.cpp vec_dot type, Q8_K, Q8_0 or Q8_1, integer
dots; kernels_kq*.c, kernels_q80*.c; the JSON key keeps its first name), next to ggml's own mul_mat on the
same block type (native/tools/ggml_mul_mat.c built against the llama.cpp build of shared/peers; its weights in
the CPU backend's repack buffer when ggml takes them there, as llama.cpp loads a model). Each matrix is copied
into more buffers than the last-level cache holds and one call (matmul_many; ggml: one graph of one mul_mat per
copy) walks the copies, so weights stream from memory as in decode. Rounds alternate the modes; the report keeps
each mode's median over rounds of the best of two passes. Prints a table, writes JSON. No thresholds: tests gate
the bits, this measures.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ...format.quantize import pack_matrix
from ...native import Runtime, matrix_view

SHAPES = {"2048x2048": (2048, 2048), "gate/up 768x2048": (768, 2048), "down 2048x768": (2048, 768)}
PEER = Path(os.environ.get("COLIBRI_LLAMA_CPP", "/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp"))
TOOL = Path(__file__).resolve().parents[3] / "native" / "tools" / "ggml_mul_mat.c"


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench kquants", description=__doc__.split("\n")[0])
    ap.add_argument("--schemes", default="q4_k,q6_k")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated: {list(SHAPES)} or ROWSxCOLS")
    ap.add_argument("--tokens", default="1,4,32")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mib", type=int, default=64, help="MiB of copies per matrix (>> last-level cache)")
    ap.add_argument("--no-peer", action="store_true", help="skip ggml's mul_mat")
    ap.add_argument("--json", default="bench_kquants.json")
    return ap.parse_args(argv)


def shape_of(name):
    """(rows, cols) of a SHAPES name or of "ROWSxCOLS" (cols a multiple of 256)."""
    if name in SHAPES:
        return SHAPES[name]
    try:
        rows, cols = (int(v) for v in name.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--shapes: {name!r} is neither one of {list(SHAPES)} nor ROWSxCOLS") from None
    if rows < 1 or cols < 256 or cols % 256:
        raise SystemExit(f"--shapes: {name!r} needs rows >= 1 and cols a multiple of 256")
    return rows, cols


def _copies(scheme, rows, cols, mib, rng):
    w = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02)
    blob, layout = pack_matrix(w, scheme)
    n = max(2, -(-(mib << 20) // blob.nbytes))
    return [matrix_view(blob.copy(), layout) for _ in range(n)]


def _pass(rt, views, x):
    """(wall, process CPU) seconds per matrix of one matmul_many over all the copies (one call, as ggml's peer runs
    one graph: no per-call Python overhead; the input is quantized once for all of them, as q/k/v share it)."""
    t, c = time.perf_counter(), time.process_time()
    rt.matmul_many(x, views)
    return (time.perf_counter() - t) / len(views), (time.process_time() - c) / len(views)


def build_peer(workdir):
    """Path of the compiled ggml peer, or (None, why) when the llama.cpp build is not there."""
    inc, lib = PEER / "ggml" / "include", PEER / "build" / "bin"
    missing = [str(p) for p in (inc / "ggml-backend.h", lib / "libggml-cpu.so", TOOL) if not p.exists()]
    if missing:
        return None, f"missing {', '.join(missing)}"
    exe = Path(workdir) / "ggml_mul_mat"
    cmd = ["cc", "-O2", "-std=c11", str(TOOL), f"-I{inc}", f"-L{lib}", f"-Wl,-rpath,{lib}", "-lggml", "-lggml-base",
           "-lggml-cpu", "-lm", "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return (exe, None) if r.returncode == 0 else (None, f"cc failed: {r.stderr.strip()[:300]}")


def peer_ms(exe, scheme, rows, cols, tokens, threads, mib, reps):
    """ggml's ms per matmul (best of reps passes over the copies) and its weights' buffer type, or (None, None).
    q4_k_r8 / q6_k_r16 (Q4_K's / Q6_K's blocks interleaved by rows) stand beside ggml's Q4_K (which it repacks its
    own way) / Q6_K."""
    peer_type = {"q4_k_r8": "q4_k", "q6_k_r16": "q6_k"}.get(scheme, scheme)
    r = subprocess.run([str(exe), peer_type, str(rows), str(cols), str(tokens), str(threads), str(mib), str(reps)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(f"  ggml peer failed: {r.stderr.strip()[:300]}", file=sys.stderr)
        return None, None
    out = dict(kv.split("=") for kv in r.stdout.split())
    return float(out["best_ms"]), out.get("buffer")


def _rounds(args, old, new, views, x, peer):
    """{mode: [(wall, cpu) seconds per round]}: each round times every mode, the order reversed every other round;
    peer() (ggml, or None) runs its own process each round."""
    times = {"decode": [], "q8k": [], "ggml": []}
    modes = [("decode", old), ("q8k", new), ("ggml", None)]
    for rnd in range(args.rounds):
        for mode, rt in (modes if rnd % 2 == 0 else modes[::-1]):
            if rt is None:
                ms = peer() if peer else None
                if ms is not None:
                    times["ggml"].append((ms / 1e3, None))
                continue
            rt.matmul(x, views[0])                          # warm the arena
            times[mode].append(min(_pass(rt, views, x) for _ in range(2)))
    return times


def measure(args, exe):
    rng = np.random.default_rng(7)
    rows, buffers = [], {}
    for scheme, shape in [(a, b) for a in args.schemes.split(",") if a for b in args.shapes.split(",") if b]:
        r_, c_ = shape_of(shape)
        views = _copies(scheme, r_, c_, args.mib, rng)
        for threads in [int(t) for t in args.threads.split(",") if t]:
            with Runtime(threads=threads, w8a8=False) as old, Runtime(threads=threads, w8a8=True) as new:
                for n in [int(t) for t in args.tokens.split(",") if t]:
                    def peer():
                        ms, buffers[scheme] = peer_ms(exe, scheme, r_, c_, n, threads, args.mib, 2)
                        return ms
                    times = _rounds(args, old, new, views, rng.standard_normal((n, c_), dtype=np.float32),
                                    peer if exe else None)
                    row = {"scheme": scheme, "shape": shape, "rows": r_, "cols": c_, "tokens": n,
                           "threads": threads, "bytes": views[0].layout.data_bytes, "ggml_buffer": buffers.get(scheme)}
                    for m, v in times.items():
                        if v:
                            row[f"{m}_ms"] = statistics.median(w for w, _ in v) * 1e3
                        if v and v[0][1] is not None:
                            row[f"{m}_cpu_ms"] = statistics.median(c for _, c in v) * 1e3
                    rows.append(row)
                    print(_line(row), flush=True)
    return rows


def _line(r):
    g = f"  ggml {r['ggml_ms']:7.3f} ms ({r.get('ggml_buffer')})" if r.get("ggml_ms") else ""
    return (f"{r['scheme']} {r['shape']:18s} tokens {r['tokens']:3d} threads {r['threads']}: "
            f"decode {r['decode_ms']:7.3f} ms  integer {r['q8k_ms']:7.3f} ms ({r['decode_ms'] / r['q8k_ms']:.2f}x){g}")


def markdown(rows):
    out = ("| scheme | shape | tokens | threads | decode path ms | integer path ms | ggml mul_mat ms |\n"
           "|---|---|---|---|---|---|---|\n")
    for r in rows:
        g = f"{r['ggml_ms']:.3f}" if r.get("ggml_ms") else "-"
        out += (f"| {r['scheme']} | {r['shape']} | {r['tokens']} | {r['threads']} | {r['decode_ms']:.3f} | "
                f"{r['q8k_ms']:.3f} | {g} |\n")
    return out


def main(argv=None):
    from .run import machine
    args = parse_args(list(sys.argv[2:] if argv is None else argv))
    with tempfile.TemporaryDirectory() as tmp:
        exe, why = (None, "--no-peer") if args.no_peer else build_peer(tmp)
        if why:
            print(f"ggml peer skipped: {why}", file=sys.stderr)
        rows = measure(args, exe)
    print(markdown(rows))
    with open(args.json, "w") as f:
        json.dump({"machine": machine(), "args": vars(args), "peer_skipped": why, "rows": rows}, f, indent=1)
    return 0
