"""`python -m colibri_dist.bench kernels [--quick] [--threads N] [--json PATH]`: kernel speed vs this machine's limits.

Role: measures, in one run, (1) the machine's memory read bandwidth (numpy sums
over a buffer far larger than L3, 1..N threads); (2) int8 decode: expert bytes
streamed per second at batch 1 and distinct-expert bytes at batch 16 on an
OLMoE-sized layer, plus one Mixtral-sized expert, as ratios of that
bandwidth; (3) tokens/s at batch 2048 vs the transformers fp32
OlmoeSparseMoeBlock on the same thread count; (4) routing ns/token vs numpy
argpartition and torch.topk. Prints ratios, writes JSON. No thresholds.
"""
import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..format.quantize import pack_expert
from ..native import ExpertTable, Gating, Runtime, expert_view, gate_logits, simd_name

FULL = dict(hidden=2048, inter=1024, experts=64, top_k=8, big_batch=2048, mixtral=(4096, 14336), bw_mib=1024)
QUICK = dict(hidden=512, inter=256, experts=16, top_k=4, big_batch=256, mixtral=(1024, 3584), bw_mib=256)


def _best(fn, repeats, min_time=0.0):
    """Best wall time of `repeats` calls (at least until min_time has passed)."""
    best, t_end = float("inf"), time.perf_counter() + min_time
    for i in range(10 ** 6):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        if i + 1 >= repeats and time.perf_counter() >= t_end:
            return best


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


def decode_bench(rt, cfg, bw, rng, layer):
    """Batch 1 and 16 on the layer, batch 1 on a Mixtral-sized expert: streamed bytes/s / bandwidth."""
    router, gating, views = layer
    table = ExpertTable(views, len(views), cfg["hidden"])  # built once, as Engine does per layer
    out = {}
    for n in (1, 16):
        xs = [rng.standard_normal((n, cfg["hidden"]), dtype=np.float32) for _ in range(16)]
        distinct, it = [], iter(range(10 ** 9))

        def step():
            x = xs[next(it) % len(xs)]
            _, idx, _ = rt.moe_forward(x, router, gating, table)
            distinct.append(len(np.unique(idx)))
        step()
        t = _best(step, 20, min_time=1.0)
        nbytes = float(np.median(distinct)) * views[0].nbytes
        out[f"batch{n}"] = {"seconds": t, "distinct_experts": float(np.median(distinct)),
                            "bytes_per_s": nbytes / t, "ratio_to_bandwidth": nbytes / t / bw}
    h, i = cfg["mixtral"]
    big = _experts(rng, h, i, 1)[0]
    x = rng.standard_normal((1, h), dtype=np.float32)
    t = _best(lambda: rt.expert_forward(x, big), 5, min_time=1.0)
    out["mixtral_expert_batch1"] = {"shape": [h, i], "seconds": t, "bytes_per_s": big.nbytes / t,
                                    "ratio_to_bandwidth": big.nbytes / t / bw}
    return out


def big_batch_bench(rt, cfg, threads, rng):
    """Tokens/s of our int8 layer vs the transformers fp32 OlmoeSparseMoeBlock at the same thread count."""
    import torch
    from transformers.models.olmoe.configuration_olmoe import OlmoeConfig
    from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    block = OlmoeSparseMoeBlock(OlmoeConfig(hidden_size=cfg["hidden"], intermediate_size=cfg["inter"],
                                            num_experts=cfg["experts"], num_experts_per_tok=cfg["top_k"])).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.02)
    gu, dn = block.experts.gate_up_proj.detach().numpy(), block.experts.down_proj.detach().numpy()
    I = cfg["inter"]
    views = _experts(rng, cfg["hidden"], I, cfg["experts"], source=lambda e: (gu[e, :I], gu[e, I:], dn[e]))
    router = block.gate.weight.detach().numpy().copy()
    gating = Gating("softmax_topk", cfg["experts"], cfg["top_k"])
    x = rng.standard_normal((cfg["big_batch"], cfg["hidden"]), dtype=np.float32)
    xt = torch.from_numpy(x)[None]
    with torch.no_grad():
        ref = block(xt)[0].numpy()
        t_torch = _best(lambda: block(xt), 2)
    fp32_bytes = sum(p.numel() * 4 for p in block.experts.parameters())
    out = {"tokens": cfg["big_batch"], "torch_fp32_tokens_per_s": cfg["big_batch"] / t_torch,
           "expert_bytes_ours": sum(v.nbytes for v in views), "expert_bytes_torch_fp32": fp32_bytes}
    with Runtime(threads=threads, w8a8=True) as rt8:
        for name, r in (("int8", rt), ("int8_w8a8", rt8)):
            y, _, _ = r.moe_forward(x, router, gating, views)
            t = _best(lambda: r.moe_forward(x, router, gating, views), 2)
            out[name] = {"tokens_per_s": cfg["big_batch"] / t, "speedup_vs_torch": t_torch / t,
                         "cosine_vs_torch": float((y.ravel() @ ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref)))}
    return out, (router, gating, views)


def quality_bench(rng):
    """Every weight scheme vs the transformers fp32 OlmoeSparseMoeBlock (hidden 512, inter 256, 16 experts, top 4)."""
    import torch
    from transformers.models.olmoe.configuration_olmoe import OlmoeConfig
    from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock
    from ..format.layout import SCHEMES
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
        for scheme in list(SCHEMES) + ["int8+w8a8"]:
            r = rt8 if scheme == "int8+w8a8" else rt
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


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": model, "cpus": os.cpu_count(), "simd": simd_name(), "python": platform.python_version(),
            "numpy": np.__version__}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench kernels", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes: proves the benchmark runs")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", default="bench_kernels.json")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    rng = np.random.default_rng(0)
    report = {"command": " ".join([sys.executable, "-m", "colibri_dist.bench", "kernels"] + list(argv or sys.argv[2:])),
              "machine": machine(), "threads": args.threads, "config": cfg}
    bw, per_threads = read_bandwidth(cfg["bw_mib"], args.threads)
    report["read_bandwidth_bytes_per_s"] = bw
    report["read_bandwidth_by_method"] = per_threads
    print(f"read bandwidth: {bw / 1e9:.1f} GB/s (numpy reductions over {cfg['bw_mib']} MiB, "
          f"best of sum/or and 1..{args.threads} threads)")
    with Runtime(threads=args.threads) as rt:
        report["batch_large"], layer = big_batch_bench(rt, cfg, args.threads, rng)
        b = report["batch_large"]
        for name in ("int8", "int8_w8a8"):
            print(f"batch {b['tokens']} {name}: {b[name]['tokens_per_s']:.0f} tok/s vs transformers fp32 "
                  f"{b['torch_fp32_tokens_per_s']:.0f} tok/s -> {b[name]['speedup_vs_torch']:.2f}x "
                  f"(cosine {b[name]['cosine_vs_torch']:.5f}, weights "
                  f"{b['expert_bytes_torch_fp32'] / b['expert_bytes_ours']:.1f}x smaller)")
        report["decode"] = decode_bench(rt, cfg, bw, rng, layer)
        for name, r in report["decode"].items():
            print(f"{name}: {r['bytes_per_s'] / 1e9:.1f} GB/s streamed = {r['ratio_to_bandwidth']:.2f} x read bandwidth")
        report["engine"] = rt.stats()
    report["quality"] = quality_bench(rng)
    for r in report["quality"]:
        print(f"quality {r['scheme']:12s} cosine {r['cosine']:.6f}  max err {r['max_abs_err_rel']:.2e}  "
              f"rms err {r['rms_err_rel']:.2e}  ({r['bytes_per_expert']} B/expert)")
    report["routing"] = routing_bench(args.quick)
    for r in report["routing"]:
        print(f"routing E={r['experts']:3d} k={r['top_k']}: ours {r['ours_ns_per_token']:.0f} ns/token, "
              f"numpy {r['numpy_argpartition_ns_per_token']:.0f}, torch {r['torch_topk_ns_per_token']:.0f}")
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.json}")
    return 0
