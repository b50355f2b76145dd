"""`python -m colibri_dist.bench peer --llama-bin DIR`: colibri against llama.cpp on this machine, same run.

Role: one run measures, on the whole-model benchmark's checkpoint (bench/model/run.py: OLMoE-shaped, 4 layers,
hidden 2048, 64 experts top 8, vocab 50304, random bf16 weights), llama.cpp on GGUF files of it (f16 by its
converter, then Q8_0 / Q4_0 / Q4_K_M by llama-quantize; peer_llama.py) and colibri in several encodings and
modes (peer_colibri.py), one column on llama.cpp's Q4_K_M file itself, imported (the same weights, bit for
bit). Engines alternate within each round (the order reverses every other round), one model resident
at a time; each round also measures the read bandwidth. Both sides are measured the way
llama-batched-bench does: prefill of 1 x `--prompt` tokens, then aggregate decode of 1, 8 and 32 sequences
after a `--decode-prompt`-token prompt each. Reported: medians over rounds, the 1-minute load average
before each measurement (the machine may be shared), bytes per decode token (GGUF tensor table; container
entries) x tok/s against the bandwidth, and ratios of every colibri column to the best llama.cpp one.
JSON always; `--markdown` writes the tables. Never run by the tests (they check the table code only).
"""
import argparse
import json
import os
import sys

import numpy as np

from . import peer_colibri, peer_llama
from .peer_table import markdown, summarize

TYPES = ("Q8_0", "Q4_0", "Q4_K_M")


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench peer", description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", required=True, metavar="DIR",
                    help="bin folder of a llama.cpp build (../shared/peers/build-llama-cpp.sh prints it)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=2, help="alternated rounds; medians over them (default 2)")
    ap.add_argument("--types", default=",".join(TYPES), help="llama.cpp quantization types (comma-separated)")
    ap.add_argument("--engines", default=",".join(peer_colibri.COLUMNS),
                    help="colibri columns (comma-separated) from: " + ", ".join(peer_colibri.COLUMNS))
    ap.add_argument("--prompt", type=int, default=512, help="prefill prompt length (1 sequence)")
    ap.add_argument("--decode-prompt", type=int, default=64, help="prompt length of each decoding sequence")
    ap.add_argument("--gen", type=int, default=32, help="decode steps per measurement")
    ap.add_argument("--parallel", default="1,8,32", help="decoding sequences per measurement")
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "colibri"))
    ap.add_argument("--gguf-dir", default=None, help="where the GGUF files go (default: beside the checkpoint)")
    ap.add_argument("--bw-mib", type=int, default=1024, help="read-bandwidth buffer (MiB, >> L3)")
    ap.add_argument("--quick", action="store_true", help="the small model of `bench model --quick`")
    ap.add_argument("--json", default="bench_peer.json")
    ap.add_argument("--markdown", default=None, help="also write the tables here")
    args = ap.parse_args(argv)
    args.types = [t for t in args.types.split(",") if t]
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in args.engines if e not in peer_colibri.COLUMNS]
    if bad:
        ap.error(f"--engines: unknown {bad[0]!r}; choose from {', '.join(peer_colibri.COLUMNS)}")
    args.types += [t for t in (peer_colibri.IMPORTED[e][0] for e in args.engines if e in peer_colibri.IMPORTED)
                   if t not in args.types]      # an imported column needs llama.cpp's file of its type
    try:
        args.parallel = [int(p) for p in args.parallel.split(",")]
    except ValueError:
        ap.error(f"--parallel: expected comma-separated integers, got {args.parallel!r}")
    for flag in ("rounds", "prompt", "decode_prompt", "gen", "threads"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')}: must be >= 1, got {getattr(args, flag)}")
    if any(p < 1 for p in args.parallel):
        ap.error(f"--parallel: every count must be >= 1, got {args.parallel}")
    return args


def schedule(names, rounds):
    """MoeExecutor order per round: as given, reversed every other round (drift spreads over all)."""
    return [list(names) if r % 2 == 0 else list(reversed(names)) for r in range(rounds)]


def interleave(llama, ours):
    """llama.cpp and colibri columns alternating: Q8_0, colibri ..., Q4_0, colibri ..., then the rest."""
    out = []
    for i in range(max(len(llama), len(ours))):
        out += llama[i:i + 1] + ours[i:i + 1]
    return out


def _one(args, name, runs, files, paths, t):
    load = os.getloadavg()[0]
    if name in files:
        got = {}
        for prompt, gen, pls in runs:
            got[(prompt, gen)], _ = peer_llama.batched(t, files[name], args.threads, prompt, gen, pls)
    else:
        got, _ = peer_colibri.measure(paths[name], peer_colibri.COLUMNS[name], args.threads, runs)
    return {"load_before": load, "runs": {f"{p}x{g}": v for (p, g), v in got.items()}}


def rounds(args, files, paths, t):
    from ..kernels.run import read_bandwidth
    runs = [(args.prompt, args.gen, [1]), (args.decode_prompt, args.gen, args.parallel)]
    names = interleave([f"llama.cpp {k}" for k in files], list(paths))
    files = {f"llama.cpp {k}": v for k, v in files.items()}
    out = []
    for r, order in enumerate(schedule(names, args.rounds)):
        load = os.getloadavg()[0]
        bw, _ = read_bandwidth(args.bw_mib, args.threads)
        rec = {"round": r, "order": order, "read_bandwidth": {"bytes_per_s": bw, "load_before": load}, "engines": {}}
        for name in order:
            rec["engines"][name] = _one(args, name, runs, files, paths, t)
            print(f"round {r} {name}: {_brief(rec['engines'][name], args)}", flush=True)
        out.append(rec)
    return out


def _brief(e, args):
    pre = e["runs"][f"{args.prompt}x{args.gen}"][1]["prefill_tok_s"]
    dec = e["runs"][f"{args.decode_prompt}x{args.gen}"]
    return f"prefill {pre:.0f} tok/s; decode " + ", ".join(f"{pl}: {v['decode_tok_s']:.1f}" for pl, v in dec.items()) \
        + f" tok/s (load {e['load_before']:.1f})"


def prepare(args, cfg):
    from .run import checkpoint
    t = peer_llama.tools(args.llama_bin)        # fails first, before anything heavy
    hf_dir, _ = checkpoint(cfg, args.cache)
    cache_dir = os.path.dirname(hf_dir)
    files = peer_llama.gguf_files(t, hf_dir, args.gguf_dir or os.path.join(cache_dir, "gguf"), args.types,
                                  args.threads)
    imported, engines = peer_colibri.IMPORTED, peer_colibri.ENGINES
    paths = {name: peer_colibri.imported(files[imported[name][0]], cache_dir) if name in imported
             else peer_colibri.container(hf_dir, cache_dir, *engines[name][:3]) for name in args.engines}
    return t, files, paths


def token_bytes(t, files, paths, cfg):
    """{engine: bytes per decode token} from the GGUF tables and the containers; llama.cpp's also estimated
    from the int8 container's shapes by format.token_bytes (to check that estimate against the real file)."""
    from ...format import token_bytes as tb
    from ...format.reader import open_model
    out, est = {}, {}
    for typ, path in files.items():
        out[f"llama.cpp {typ}"], _ = peer_llama.gguf_token_bytes(t, path, cfg["top_k"], cfg["experts"])
    for name, path in paths.items():
        with open_model(path) as m:
            out[name] = tb.ours(m)["total"]
            for typ in files:
                if typ in tb.FTYPES:
                    est[f"llama.cpp {typ}"] = tb.llama_cpp_estimate(m, typ)["total"]
    return out, est


def main(argv=None):
    from ..kernels.run import machine
    from .run import FULL, QUICK
    args = parse_args(list(sys.argv[2:] if argv is None else argv))
    cfg = QUICK if args.quick else FULL
    report = {"command": " ".join([sys.executable, "-m", "colibri_dist.bench", "peer"] +
                                  list(sys.argv[2:] if argv is None else argv)),
              "machine": machine(), "threads": args.threads, "config": cfg}
    t, files, paths = prepare(args, cfg)
    report["llama_cpp"] = {"bin": t.bin, "gguf": files}
    report["colibri"] = {name: {"path": p, "encodings": peer_colibri.encodings(name),
                                "llm_kwargs": peer_colibri.COLUMNS[name]} for name, p in paths.items()}
    report["bytes_per_token"], report["bytes_per_token_estimated"] = token_bytes(t, files, paths, cfg)
    report["rounds"] = rounds(args, files, paths, t)
    report["machine"]["loadavg_after"] = list(os.getloadavg())
    report["summary"] = summarize(report, args.prompt, args.decode_prompt, args.gen, args.parallel)
    text = markdown(report["summary"])
    print(text)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2, default=_json)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    print(f"wrote {args.json}")
    return 0


def _json(o):
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
