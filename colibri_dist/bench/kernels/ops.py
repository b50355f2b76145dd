"""`python -m colibri_dist.bench model_ops [--quick] [--threads N] [--json PATH]`: whole-model op speed.

Role: measures the dense products (f32 / bf16 / int8 at decode n=1 and a
prefill chunk) against torch fp32 F.linear, and paged-KV attention (GQA decode
on an f32 and an f16 cache, a prompt, MLA decode on a latent cache) against
dense fp32 torch attention (grouped GEMMs for decode, causal
scaled_dot_product_attention for the prompt) on the same thread count. Prints times and ratios, writes JSON. No thresholds.
"""
import argparse
import json
import os
import sys

import numpy as np

from ...native import AttnSpec, Runtime, kv_write, quantized_matrix, simd_name
from .run import _best, machine

FULL = dict(dim=4096, prefill=64, ctx=4096, prompt=512, heads=32, kv_heads=8, head_dim=128, mla_heads=128)
QUICK = dict(dim=512, prefill=16, ctx=256, prompt=64, heads=8, kv_heads=2, head_dim=64, mla_heads=16)


def _timed(pairs, repeats):
    """pairs: [(ours, torch's)] -> [(t_ours, t_torch)]. Every colibri call first, then every torch call:
    either pool's spinning workers (ours after a region, OpenMP's after a call) would slow the other."""
    ours = [_best(a, *repeats) for a, _ in pairs]
    return list(zip(ours, [_best(b, *repeats) for _, b in pairs]))


def matmul_bench(rt, cfg, rng, repeats):
    import torch
    d = cfg["dim"]
    w = (rng.standard_normal((d, d)) * 0.02).astype(np.float32)
    rows, pairs, wt = [], [], torch.from_numpy(w)
    for scheme in ("f32", "bf16", "int8"):
        view = quantized_matrix(w, scheme)
        for n in (1, cfg["prefill"]):
            x = rng.standard_normal((n, d)).astype(np.float32)
            xt = torch.from_numpy(x)
            pairs.append((lambda x=x, v=view: rt.matmul(x, v), lambda xt=xt: torch.nn.functional.linear(xt, wt)))
            rows.append({"scheme": scheme, "rows": d, "cols": d, "n": n, "weight_bytes": view.layout.data_bytes})
    for r, (t, t_torch) in zip(rows, _timed(pairs, repeats)):
        r.update(ms=t * 1e3, gflop_per_s=2 * r["n"] * d * d / t / 1e9, weight_gb_per_s=r["weight_bytes"] / t / 1e9,
                 torch_fp32_ms=t_torch * 1e3, speedup_vs_torch_fp32=t_torch / t)
    return rows


def _filled_cache(spec, ctx, rng, shared=False):
    nb = ctx // spec.block_size + 2
    dt = np.float32 if spec.cache_dtype == "f32" else np.uint16
    k_cache = np.zeros((nb, spec.n_kv_heads, spec.block_size, spec.qk_dim), dt)
    v_cache = k_cache if shared else np.zeros((nb, spec.n_kv_heads, spec.block_size, spec.v_row), dt)
    k = rng.standard_normal((ctx, spec.n_kv_heads, spec.qk_dim)).astype(np.float32)
    v = None if shared else rng.standard_normal((ctx, spec.n_kv_heads, spec.v_row)).astype(np.float32)
    table = [np.arange(nb, dtype=np.int32)]
    kv_write(spec, k_cache, None if shared else v_cache, [0, ctx], [0], table, k, v)
    return k_cache, v_cache, table, k, (k if shared else v)


def _torch_attention(q, k, v, spec):
    """Dense fp32 torch reference on q [n, H, d], k/v [ctx, KV, d] -> a callable. Decode (n = 1): one
    grouped GEMM pair per kv head (MQA/MLA friendly); prompts: causal scaled_dot_product_attention."""
    import torch
    G, KV = spec.n_heads // spec.n_kv_heads, spec.n_kv_heads
    kt = torch.from_numpy(k).transpose(0, 1)                                        # [KV, ctx, d]
    vt = torch.from_numpy(np.ascontiguousarray(v[..., :spec.v_dim])).transpose(0, 1)
    if q.shape[0] == 1:
        qt = torch.from_numpy(q).reshape(KV, G, -1)
        return lambda: torch.softmax(qt @ kt.transpose(1, 2) * spec.scale, dim=-1) @ vt
    qt = torch.from_numpy(q).transpose(0, 1)[None]
    kr, vr = kt[None].repeat_interleave(G, dim=1), vt[None].repeat_interleave(G, dim=1)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(qt, kr, vr, is_causal=True, scale=spec.scale)


def attention_bench(rt, cfg, rng, repeats):
    H, KV, hd, ctx = cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["ctx"]
    rows = []
    cases = [("gqa_decode", AttnSpec(H, KV, hd, hd, hd, 16, dt, scale=hd ** -0.5), ctx, 1, False) for dt in ("f32", "f16")]
    cases.append(("gqa_prefill", AttnSpec(H, KV, hd, hd, hd, 16, "f16", scale=hd ** -0.5), cfg["prompt"],
                  cfg["prompt"], False))
    mla = AttnSpec(cfg["mla_heads"], 1, 576, 512, 576, 16, "f16", scale=192 ** -0.5)
    cases.append(("mla_decode", mla, ctx, 1, True))
    pairs = []
    for name, spec, n_ctx, n_q, shared in cases:
        kc, vc, table, k, v = _filled_cache(spec, n_ctx, rng, shared)
        q = rng.standard_normal((n_q, spec.n_heads, spec.qk_dim)).astype(np.float32)
        args = (spec, kc, vc, [0, n_q], [n_ctx - n_q], table, q)
        pairs.append((lambda args=args: rt.attention(*args), _torch_attention(q, k, v, spec)))
        rows.append({"case": name, "cache_dtype": spec.cache_dtype, "heads": spec.n_heads, "kv_heads": spec.n_kv_heads,
                     "qk_dim": spec.qk_dim, "v_dim": spec.v_dim, "context": n_ctx, "queries": n_q})
    for r, (t, t_torch) in zip(rows, _timed(pairs, repeats)):
        r.update(ms=t * 1e3, torch_fp32_ms=t_torch * 1e3, speedup_vs_torch=t_torch / t)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench model_ops", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes: proves the benchmark runs")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", default="bench_model_ops.json")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    cfg, repeats = (QUICK, (3, 0.05)) if args.quick else (FULL, (5, 0.5))   # (calls, seconds) at least
    rng = np.random.default_rng(0)
    report = {"bench": "model_ops", "command": " ".join([sys.executable, "-m", "colibri_dist.bench", "model_ops"] +
                                                         list(argv if argv is not None else sys.argv[2:])),
              "machine": machine(), "threads": args.threads, "simd": simd_name(), "config": cfg}
    with Runtime(threads=args.threads) as rt:
        report["matmul"] = matmul_bench(rt, cfg, rng, repeats)
        for r in report["matmul"]:
            print(f"matmul {r['scheme']:5s} {r['rows']}x{r['cols']} n={r['n']:<3d} {r['ms']:8.3f} ms "
                  f"{r['gflop_per_s']:6.1f} GFLOP/s  vs torch fp32 {r['speedup_vs_torch_fp32']:.2f}x")
        report["attention"] = attention_bench(rt, cfg, rng, repeats)
        for r in report["attention"]:
            print(f"attention {r['case']:11s} {r['cache_dtype']} heads {r['heads']}/{r['kv_heads']} ctx {r['context']} "
                  f"q {r['queries']}: {r['ms']:8.2f} ms  vs torch fp32 {r['speedup_vs_torch']:.2f}x")
        report["engine"] = rt.stats()
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
