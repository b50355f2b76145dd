"""`python -m colibri_dist.bench convert [--size-mb N] [--schemes int8,bf16] [--json PATH]`.

Role in the data flow: measures the HF -> .colibri converter (docs/PERFORMANCE.md,
"Container and converter") against baselines taken in the same run:
  1. generates a sharded bf16 Mixtral-style safetensors checkpoint of --size-mb
     (default 2200 MB) with numpy, streaming (never the whole model in memory);
  2. plain read: every shard read sequentially (16 MiB os.read), page cache of
     the shards dropped first (posix_fadvise DONTNEED) - the baseline;
  3. convert per scheme in a child process: wall time, source GB/s, ratio to the
     plain read, peak RSS (wait4 ru_maxrss) against the largest expert (f32 widened)
     and against a child that only imports colibri_dist;
  4. one read per expert: loads every expert of a layer with read_expert under
     `strace -c -e trace=pread64,preadv,read` (when strace exists) and counts calls.
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HIDDEN, INTER, N_EXPERTS = 1024, 2816, 8


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench convert")
    ap.add_argument("--size-mb", type=int, default=2200, help="source checkpoint size (default 2200)")
    ap.add_argument("--schemes", default="int8,bf16", help="comma list of --experts schemes")
    ap.add_argument("--json", default=None, help="write results here")
    ap.add_argument("--workdir", default=None, help="scratch dir (default: a temp dir, removed after)")
    return ap.parse_args(argv)


# -- 1. synthetic checkpoint -------------------------------------------------------

def _bf16(rng, shape):
    w = rng.standard_normal(shape, dtype=np.float32) * 0.02
    return (w.view(np.uint32) >> 16).astype(np.uint16)


def _layer_tensors(layer):
    p = f"model.layers.{layer}.block_sparse_moe"
    out = [(f"{p}.gate.weight", (N_EXPERTS, HIDDEN)), (f"model.layers.{layer}.post_attention_layernorm.weight", (HIDDEN,))]
    for e in range(N_EXPERTS):
        out += [(f"{p}.experts.{e}.w1.weight", (INTER, HIDDEN)), (f"{p}.experts.{e}.w3.weight", (INTER, HIDDEN)),
                (f"{p}.experts.{e}.w2.weight", (HIDDEN, INTER))]
    return out


def _write_shard(path, tensors, rng):
    header, pos = {}, 0
    for name, shape in tensors:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [pos, pos + n]}
        pos += n
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as fh:
        fh.write(len(head).to_bytes(8, "little") + head)
        for name, shape in tensors:
            fh.write(_bf16(rng, shape).tobytes())


def make_checkpoint(root, size_mb):
    per_layer = N_EXPERTS * 3 * HIDDEN * INTER * 2
    n_layers = max(1, round(size_mb * 2**20 / per_layer))
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    weight_map = {}
    for layer in range(n_layers):                    # one shard per layer
        shard = f"model-{layer + 1:05d}-of-{n_layers:05d}.safetensors"
        tensors = _layer_tensors(layer)
        _write_shard(os.path.join(root, shard), tensors, rng)
        weight_map.update({name: shard for name, _ in tensors})
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(os.path.join(root, "model.safetensors.index.json"), "w"))
    json.dump({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": HIDDEN,
               "intermediate_size": INTER, "num_local_experts": N_EXPERTS, "num_experts_per_tok": 2,
               "num_hidden_layers": n_layers}, open(os.path.join(root, "config.json"), "w"))
    return n_layers


# -- 2./3. timing --------------------------------------------------------------------

def _shards(root):
    return sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".safetensors"))


def drop_cache(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd) if os.access(p, os.W_OK) else None
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def plain_read(paths):
    drop_cache(paths)
    total, t0 = 0, time.perf_counter()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            while True:
                chunk = os.read(fd, 16 << 20)
                if not chunk:
                    break
                total += len(chunk)
        finally:
            os.close(fd)
    return total, time.perf_counter() - t0


def run_child(code):
    """Run python -c code; returns (seconds, peak RSS bytes) from wait4."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code])
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}): {code}")
    return elapsed, usage.ru_maxrss * 1024


def convert_child(src, dst, scheme, paths):
    drop_cache(paths)
    code = (f"from colibri_dist.format.convert import convert; "
            f"convert({src!r}, {dst!r}, experts={scheme!r}, progress=False)")
    return run_child(code)


# -- 4. reads per expert -------------------------------------------------------------

def count_reads(path, layer, workdir):
    """strace the loads of every expert of `layer`; count read-family calls on the model fd."""
    if not shutil.which("strace"):
        return {"method": "unavailable (no strace)"}
    code = (f"import os\nfrom colibri_dist.format.reader import open_model\n"
            f"m = open_model({path!r})\nos.write(2, b'MARK\\n')\n"
            f"blobs = [m.read_expert({layer}, e) for e in range(m.config.n_experts)]\n")
    trace = os.path.join(workdir, "strace.txt")
    subprocess.run(["strace", "-f", "-o", trace, "-e", "trace=openat,pread64,preadv,preadv2,read,write",
                    sys.executable, "-c", code], check=True, capture_output=True)
    text = open(trace).read()
    fd = re.search(r'openat\([^"]*"' + re.escape(path) + r'"[^)]*\)\s*=\s*(\d+)', text)
    after = text.split('"MARK\\n"', 1)[-1]
    calls = re.findall(r"\b(pread64|preadv2?|read)\((\d+),", after)
    on_model = [name for name, f in calls if fd and f == fd.group(1)]
    return {"method": "strace", "experts_loaded": N_EXPERTS, "read_calls_on_model_file": len(on_model),
            "calls": sorted(set(on_model))}


def pack_seconds(scheme, repeats=3):
    """Median time of pack_expert on one random expert of the bench shape (the quantizer's share)."""
    from ...format.quantize import pack_expert
    rng = np.random.default_rng(1)
    gate = rng.standard_normal((INTER, HIDDEN), dtype=np.float32) * 0.02
    up, down = gate.copy(), np.ascontiguousarray(gate.T)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pack_expert(gate, up, down, scheme)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main(argv=None):
    args = _args(argv if argv is not None else sys.argv[1:])
    work = args.workdir or tempfile.mkdtemp(prefix="colibri-bench-convert-")
    try:
        return _run(args, work)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def _run(args, work):
    src = os.path.join(work, "src")
    t0 = time.perf_counter()
    n_layers = make_checkpoint(src, args.size_mb)
    paths = _shards(src)
    result = {"bench": "convert", "host": platform.node(), "cpus": os.cpu_count(),
              "source": {"family": "mixtral", "dtype": "bf16", "layers": n_layers, "experts": N_EXPERTS,
                         "hidden": HIDDEN, "inter": INTER, "shards": len(paths),
                         "bytes": sum(os.path.getsize(p) for p in paths),
                         "generate_s": round(time.perf_counter() - t0, 2)}}
    nbytes, t_read = plain_read(paths)
    result["plain_read"] = {"bytes": nbytes, "seconds": round(t_read, 3), "gbs": nbytes / t_read / 1e9}
    _, base_rss = run_child("import numpy, colibri_dist.format.convert")
    expert_f32 = 3 * HIDDEN * INTER * 4
    result["baseline_import_rss_bytes"] = base_rss
    result["largest_expert_f32_bytes"] = expert_f32
    result["schemes"] = {}
    for scheme in args.schemes.split(","):
        dst = os.path.join(work, f"out-{scheme}.colibri")
        secs, rss = convert_child(src, dst, scheme, paths)
        result["schemes"][scheme] = {
            "seconds": round(secs, 3), "source_gbs": nbytes / secs / 1e9,
            "ratio_to_plain_read": (nbytes / secs) / (nbytes / t_read),
            "peak_rss_bytes": rss, "peak_rss_over_import_baseline_bytes": rss - base_rss,
            "extra_rss_in_f32_experts": (rss - base_rss) / expert_f32,
            "output_bytes": os.path.getsize(dst)}
        per_expert = pack_seconds(scheme)
        result["schemes"][scheme].update(pack_expert_s_per_expert=per_expert,
                                         pack_share_of_convert=per_expert * n_layers * N_EXPERTS / secs)
        if scheme == args.schemes.split(",")[0]:
            result["reads_per_expert"] = count_reads(dst, 0, work)
        os.unlink(dst)
    _print(result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


def _print(r):
    s = r["source"]
    print(f"source: {s['bytes'] / 1e9:.2f} GB bf16, {s['layers']} layers x {s['experts']} experts, "
          f"{s['shards']} shards")
    print(f"plain read: {r['plain_read']['gbs']:.2f} GB/s (baseline)")
    print(f"import-only child peak RSS: {r['baseline_import_rss_bytes'] / 2**20:.0f} MiB; "
          f"one expert widened to f32: {r['largest_expert_f32_bytes'] / 2**20:.1f} MiB")
    for scheme, x in r["schemes"].items():
        print(f"convert --experts {scheme:<11} {x['source_gbs']:.3f} GB/s = {x['ratio_to_plain_read']:.3f}x plain read; "
              f"peak RSS {x['peak_rss_bytes'] / 2**20:.0f} MiB (+{x['peak_rss_over_import_baseline_bytes'] / 2**20:.0f} MiB "
              f"= {x['extra_rss_in_f32_experts']:.1f} f32 experts over import); pack_expert alone "
              f"{x['pack_share_of_convert']:.0%} of the time")
    rp = r.get("reads_per_expert", {})
    if rp.get("method") == "strace":
        print(f"read_expert x {rp['experts_loaded']}: {rp['read_calls_on_model_file']} read calls on the "
              f"model file ({', '.join(rp['calls'])})")


if __name__ == "__main__":
    sys.exit(main())
