"""`python -m colibri_dist.bench integrity`: what the first-use checks cost (docs/STORE.md).

Role: measures the CRC-32 (zlib vs the native PCLMULQDQ path), the finiteness scan,
Model.verify(), and a MoeExecutor's first vs second forward with checksums on and off,
on a Mixtral-shaped int8 container written to a temp dir (page cache warm).
"""
import argparse
import json
import os
import tempfile
import time
import zlib

import numpy as np


def _container(root, hidden, inter, experts, layers):
    from safetensors.numpy import save_file
    from ...format.convert import convert
    src, dst = os.path.join(root, "src"), os.path.join(root, "m.colibri")
    os.makedirs(src, exist_ok=True)
    rng = np.random.default_rng(0)
    t = {"model.embed_tokens.weight": rng.standard_normal((16, hidden)).astype(np.float32)}
    for layer in range(layers):
        p = f"model.layers.{layer}.block_sparse_moe"
        t[f"{p}.gate.weight"] = (rng.standard_normal((experts, hidden)) * 0.1).astype(np.float32)
        for e in range(experts):
            for n, s in (("w1", (inter, hidden)), ("w3", (inter, hidden)), ("w2", (hidden, inter))):
                t[f"{p}.experts.{e}.{n}.weight"] = (rng.standard_normal(s) * 0.05).astype(np.float32)
    save_file(t, os.path.join(src, "model.safetensors"))
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(dict(model_type="mixtral", hidden_size=hidden, intermediate_size=inter, num_local_experts=experts,
                       num_hidden_layers=layers, num_experts_per_tok=2, vocab_size=16), f)
    convert(src, dst, experts="int8", progress=False)
    return dst


def _rate(buf, fn, reps=5):
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return buf.nbytes * reps / (time.perf_counter() - t0) / 1e9


def _forwards(path, hidden, checksums, reps=3):
    import colibri_dist as cd
    x = np.random.default_rng(1).standard_normal((16, hidden)).astype(np.float32)
    runs = []
    for _ in range(reps):
        with cd.MoeExecutor(path, threads=1, checksums=checksums) as eng:
            t0 = time.perf_counter()
            for layer in eng.model.moe_layers:
                eng.moe_forward(layer, x)
            t1 = time.perf_counter()
            for layer in eng.model.moe_layers:
                eng.moe_forward(layer, x)
            runs.append((t1 - t0, time.perf_counter() - t1))
    return min(r[0] for r in runs), min(r[1] for r in runs)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench integrity")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--inter", type=int, default=2816)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args(argv)
    import colibri_dist as cd
    from ...format import integrity
    with tempfile.TemporaryDirectory(prefix="colibri-bench-") as root:
        path = _container(root, args.hidden, args.inter, args.experts, args.layers)
        buf = np.frombuffer(open(path, "rb").read(), np.uint8)
        print(f"container {buf.nbytes / 2**20:.1f} MiB, {args.experts * args.layers} int8 experts")
        print(f"zlib.crc32           {_rate(buf, lambda: zlib.crc32(buf)):6.2f} GB/s")
        print(f"integrity.crc32      {_rate(buf, lambda: integrity.crc32(buf)):6.2f} GB/s")
        f32 = buf[:buf.nbytes // 4 * 4]
        print(f"count_nonfinite f32  {_rate(f32, lambda: integrity.count_nonfinite(f32, 0)):6.2f} GB/s")
        for checks in (True, False):
            first, second = _forwards(path, args.hidden, checks)
            print(f"MoeExecutor checksums={checks!s:5}  first forward {first * 1e3:7.1f} ms, "
                  f"second {second * 1e3:7.1f} ms")
        with cd.open_model(path) as m:
            t0 = time.perf_counter()
            m.verify(progress=False)
            dt = time.perf_counter() - t0
        print(f"Model.verify()       {dt * 1e3:7.1f} ms ({buf.nbytes / dt / 1e9:.2f} GB/s)")
    return 0
