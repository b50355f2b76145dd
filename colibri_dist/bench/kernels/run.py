"""`python -m colibri_dist.bench kernels [--quick] [--threads N] [--json PATH] [--skip-quality]`: kernel speed vs this machine's limits.

Role: measures, in one run, (1) the machine's memory read bandwidth (numpy
reductions over a buffer far larger than L3, 1..N threads); (2) the kernels
table (bench/kernels/table.py): one OLMoE-sized MoE layer at batch 1, 16, 256
and 2048 in every weight mode (int8, int8 + w8a8, int4-g32/g64 weight-only and
+ w4a8) on every SIMD level this CPU has, next to the transformers fp32 and bf16
blocks, as tokens/s and ratios to the bandwidth and to torch; (2b) one expert
streamed from memory at 1-32 tokens and a prefill block per mode, GB/s vs the
bandwidth (bench/kernels/shapes.py; `--shapes-only` runs just (1) and this); (3) one Mixtral-sized int8
expert at batch 1 vs bandwidth; (4) quality of every scheme vs the fp32 block
(a random OLMoE block, and the five oracle families: bench/kernels/quality.py);
(4b) whole-model logits cosine / top-1 vs the fp32 model for int8 / int4 presets, weight-only
and with the w8a8 switch (w8a8 + w4a8) (bench/kernels/model_quality.py; `--model-quality-only`);
(5) routing ns/token vs numpy argpartition and torch.topk. Prints, writes JSON
with the machine (CPU flags, load average before and after). No thresholds.
"""
import argparse
import json
import os
import platform
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...format.quantize import pack_expert
from ...native import Gating, Runtime, expert_view, gate_logits, simd_levels, simd_name
from .model_quality import model_quality, model_quality_markdown
from .quality import oracle_quality
from .shapes import expert_shapes, shapes_markdown
from .table import bandwidth_markdown, kernels_table, markdown
from .table import best_time as _best

FULL = dict(hidden=2048, inter=1024, experts=64, top_k=8, batches=[1, 16, 256, 2048], mixtral=(4096, 14336),
            bw_mib=1024, shapes_bytes=96 << 20)
QUICK = dict(hidden=512, inter=256, experts=16, top_k=4, batches=[1, 16, 64], mixtral=(1024, 3584), bw_mib=256,
             shapes_bytes=4 << 20)


def read_bandwidth(mib, threads):
    """Bytes/s of reading a buffer of `mib` MiB (>> L3): best of numpy float32 sum and uint64
    bitwise-or reductions (the latter is lighter on the core), over 1..threads threads."""
    buf = np.ones(mib * 2 ** 20 // 4, dtype=np.float32)
    reducers = {"sum_f32": lambda a: a.view(np.float32).sum(), "or_u64": np.bitwise_or.reduce}
    results = {}
    for t in sorted({1, threads}):
        parts = np.array_split(buf.view(np.uint64), t)
        with ThreadPoolExecutor(t) as pool:
            for name, fn in reducers.items():
                run = lambda: list(pool.map(fn, parts))
                run()
                results[f"{name}_threads{t}"] = buf.nbytes / _best(run, 5)
    return max(results.values()), results


def _experts(rng, hidden, inter, n, scheme="int8", source=None):
    views = []
    for e in range(n):
        w = source(e) if source else [(rng.standard_normal(s, dtype=np.float32) * 0.02) for s in
                                      ((inter, hidden), (inter, hidden), (hidden, inter))]
        blob, layout = pack_expert(*w, scheme)
        views.append(expert_view(blob, layout))
    return views


def mixtral_expert_bench(rt, cfg, bw, rng):
    """One Mixtral-sized int8 expert at batch 1: streamed bytes/s / bandwidth."""
    h, i = cfg["mixtral"]
    big = _experts(rng, h, i, 1)[0]
    x = rng.standard_normal((1, h), dtype=np.float32)
    t = _best(lambda: rt.expert_forward(x, big), 5, min_time=1.0)
    return {"shape": [h, i], "seconds": t, "bytes_per_s": big.nbytes / t, "ratio_to_bandwidth": big.nbytes / t / bw}


def quality_bench(rng):
    """Every weight scheme vs the transformers fp32 OlmoeSparseMoeBlock (hidden 512, inter 256, 16 experts, top 4)."""
    import torch
    from transformers.models.olmoe.configuration_olmoe import OlmoeConfig
    from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock
    from ...format.layout import SCHEMES
    torch.manual_seed(1)
    H, I, E, K = 512, 256, 16, 4
    block = OlmoeSparseMoeBlock(OlmoeConfig(hidden_size=H, intermediate_size=I, num_experts=E,
                                            num_experts_per_tok=K)).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.02)
    gu, dn = block.experts.gate_up_proj.detach().numpy(), block.experts.down_proj.detach().numpy()
    router = block.gate.weight.detach().numpy().copy()
    x = rng.standard_normal((256, H), dtype=np.float32)
    with torch.no_grad():
        ref = block(torch.from_numpy(x)[None])[0].numpy().astype(np.float64)
    rows = []
    with Runtime(threads=1) as rt, Runtime(threads=1, w8a8=True) as rt8:
        for scheme in list(SCHEMES) + ["int8+w8a8", "int4-g32+w4a8", "int4-g64+w4a8", "int6-g64+w6a8"]:
            r = rt8 if "+" in scheme else rt
            views = _experts(rng, H, I, E, scheme.split("+")[0], source=lambda e: (gu[e, :I], gu[e, I:], dn[e]))
            y = r.moe_forward(x, router, Gating("softmax_topk", E, K), views)[0].astype(np.float64)
            rows.append({"scheme": scheme, "bytes_per_expert": views[0].nbytes,
                         "max_abs_err_rel": float(np.abs(y - ref).max() / np.abs(ref).max()),
                         "rms_err_rel": float(np.sqrt(((y - ref) ** 2).mean() / (ref ** 2).mean())),
                         "cosine": float(y.ravel() @ ref.ravel() / (np.linalg.norm(y) * np.linalg.norm(ref)))})
    return rows


def routing_bench(quick):
    import torch
    rng = np.random.default_rng(1)
    n, rows = (2048 if quick else 8192), []
    for E in (8, 64, 128, 256):
        for k in (2, 8):
            logits = rng.standard_normal((n, E), dtype=np.float32)
            g = Gating("softmax_topk_norm", E, k)
            ours = _best(lambda: gate_logits(logits, g), 5)

            def numpy_ref():
                z = np.exp(logits - logits.max(axis=1, keepdims=True))
                p = z / z.sum(axis=1, keepdims=True)
                idx = np.argpartition(-p, k - 1, axis=1)[:, :k]
                w = np.take_along_axis(p, idx, axis=1)
                return idx, w / w.sum(axis=1, keepdims=True)
            lt = torch.from_numpy(logits)

            def torch_ref():
                w, idx = torch.topk(torch.softmax(lt, dim=-1), k, dim=-1)
                return idx, w / w.sum(dim=-1, keepdim=True)
            t_np, t_torch = _best(numpy_ref, 5), _best(torch_ref, 5)
            rows.append({"experts": E, "top_k": k, "ours_ns_per_token": ours / n * 1e9,
                         "numpy_argpartition_ns_per_token": t_np / n * 1e9,
                         "torch_topk_ns_per_token": t_torch / n * 1e9})
    return rows


CPU_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16")


def machine():
    """The host of a benchmark's numbers: CPU name, family and model (a VM's name hides the generation), flags."""
    info, flags = {}, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in info:
                    info[key] = val.strip()
                elif key == "flags" and not flags:
                    flags = set(val.split())
    except OSError:
        pass
    return {"cpu": info.get("model name", "unknown"), "cpu_family": info.get("cpu family"),
            "cpu_model": info.get("model"), "cpus": os.cpu_count(), "cpu_flags": [f for f in CPU_FLAGS if f in flags],
            "simd_default": simd_name(), "simd_levels": simd_levels(), "python": platform.python_version(),
            "numpy": np.__version__, "loadavg_before": list(os.getloadavg())}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench kernels", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes: proves the benchmark runs")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", default="bench_kernels.json")
    ap.add_argument("--skip-quality", action="store_true", help="speed only (no quality or routing sections)")
    ap.add_argument("--markdown", help="also write the kernels table as markdown to this path")
    ap.add_argument("--model-quality-only", action="store_true", help="only the whole-model quality section")
    ap.add_argument("--shapes-only", action="store_true", help="only the bandwidth and the per-expert shapes section")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    rng = np.random.default_rng(0)
    report = {"command": " ".join([sys.executable, "-m", "colibri_dist.bench", "kernels"] + list(argv or sys.argv[2:])),
              "machine": machine(), "threads": args.threads, "config": cfg}
    if args.model_quality_only:
        report["model_quality"] = model_quality()
        print(model_quality_markdown(report["model_quality"]))
        return _finish(report, args, model_quality_markdown(report["model_quality"]))
    bw, per_threads = read_bandwidth(cfg["bw_mib"], args.threads)
    report["read_bandwidth_bytes_per_s"] = bw
    report["read_bandwidth_by_method"] = per_threads
    print(f"read bandwidth: {bw / 1e9:.1f} GB/s (numpy reductions over {cfg['bw_mib']} MiB, "
          f"best of sum/or and 1..{args.threads} threads)")
    print(f"expert shapes: hidden {cfg['hidden']}, inter {cfg['inter']}, {args.threads} threads, weights streamed")
    report["expert_shapes"] = expert_shapes(args.threads, bw, cfg["hidden"], cfg["inter"], min_bytes=cfg["shapes_bytes"])
    if args.shapes_only:
        return _finish(report, args, shapes_markdown(report["expert_shapes"]))
    print(f"kernels table: hidden {cfg['hidden']}, inter {cfg['inter']}, {cfg['experts']} experts, top {cfg['top_k']}, "
          f"{args.threads} threads")
    report["table"] = kernels_table(cfg, args.threads, bw, cfg["batches"])
    with Runtime(threads=args.threads) as rt:
        report["mixtral_expert_batch1"] = r = mixtral_expert_bench(rt, cfg, bw, rng)
        print(f"mixtral expert batch 1: {r['bytes_per_s'] / 1e9:.1f} GB/s = {r['ratio_to_bandwidth']:.2f} x read bandwidth")
    if not args.skip_quality:
        _quality_sections(report, rng, args.quick)
    return _finish(report, args, markdown(report) + "\n" + bandwidth_markdown(report) + "\n" +
                   shapes_markdown(report["expert_shapes"]))


def _finish(report, args, md):
    report["machine"]["loadavg_after"] = list(os.getloadavg())
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.json}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
        print(f"wrote {args.markdown}")
    return 0


def _quality_sections(report, rng, quick):
    report["quality"] = quality_bench(rng)
    for r in report["quality"]:
        print(f"quality {r['scheme']:12s} cosine {r['cosine']:.6f}  max err {r['max_abs_err_rel']:.2e}  "
              f"rms err {r['rms_err_rel']:.2e}  ({r['bytes_per_expert']} B/expert)")
    report["oracle_quality"] = oracle_quality()
    for r in report["oracle_quality"]:
        print(f"oracle {r['family']:12s} {r['scheme']:12s} cosine {r['cosine']:.6f}  rms err {r['rms_err_rel']:.2e}")
    report["model_quality"] = model_quality()
    print(model_quality_markdown(report["model_quality"]))
    report["routing"] = routing_bench(quick)
    for r in report["routing"]:
        print(f"routing E={r['experts']:3d} k={r['top_k']}: ours {r['ours_ns_per_token']:.0f} ns/token, "
              f"numpy {r['numpy_argpartition_ns_per_token']:.0f}, torch {r['torch_topk_ns_per_token']:.0f}")
