"""The kernels table: one OLMoE-sized MoE layer, tokens/s at several batch sizes, every mode and SIMD level.

Role: the speed half of `python -m colibri_dist.bench kernels`. One set of random
weights (normal, std 0.02) feeds the transformers OlmoeSparseMoeBlock in fp32 and
bf16 (torch's own CPU kernels, oneDNN) and our layer in each weight mode
(int8 weight-only, int8 + w8a8, int4-g32, int4-g64) on each SIMD level this CPU
has. Ratios are taken in the same run: against the read bandwidth (bytes of the
distinct experts a call streams / time) and against the two torch blocks.
"""
import time

import numpy as np

from ..format.quantize import pack_expert
from ..native import ExpertTable, Gating, Runtime, expert_view, simd_available, simd_force

MODES = ["int8", "int8+w8a8", "int4-g32", "int4-g64"]


def best_time(fn, repeats, min_time=0.0):
    """Best wall time of `repeats` calls (at least until min_time has passed)."""
    best, t_end = float("inf"), time.perf_counter() + min_time
    for i in range(10 ** 6):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        if i + 1 >= repeats and time.perf_counter() >= t_end:
            return best


QUICK_BUDGET = False     # tests: one timed call per measurement


def _budget(n):
    """(repeats, min seconds) per measurement: many short calls at small n, a few long ones at large n."""
    if QUICK_BUDGET:
        return 1, 0.0
    return (20, 1.0) if n <= 16 else (3, 1.0) if n <= 256 else (2, 0.0)


def torch_block(cfg, threads):
    """(fp32 block, bf16 copy) of OlmoeSparseMoeBlock with normal(0, 0.02) weights."""
    import copy

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
    return block, copy.deepcopy(block).to(torch.bfloat16)


def our_layer(block, cfg, scheme):
    """(router, gating, ExpertTable, views) of the torch block's weights packed in `scheme`."""
    gu, dn = block.experts.gate_up_proj.detach().numpy(), block.experts.down_proj.detach().numpy()
    inter = cfg["inter"]
    views = [expert_view(*pack_expert(gu[e, :inter], gu[e, inter:], dn[e], scheme)) for e in range(cfg["experts"])]
    router = block.gate.weight.detach().numpy().copy()
    return router, Gating("softmax_topk", cfg["experts"], cfg["top_k"]), ExpertTable(views, len(views), cfg["hidden"]), views


def _torch_rates(blocks, xs):
    import torch
    out = {}
    with torch.no_grad():
        for name, block, dtype in (("torch_fp32", blocks[0], torch.float32), ("torch_bf16", blocks[1], torch.bfloat16)):
            for n, x in xs.items():
                xt = torch.from_numpy(x)[None].to(dtype)
                block(xt)
                out[(name, n)] = n / best_time(lambda: block(xt), *_budget(n))
    return out


def _our_rate(rt, layer, x, bw):
    """tokens/s and streamed bytes/s / bandwidth of one layer call on x."""
    router, gating, table, views = layer
    _, idx, _ = rt.moe_forward(x, router, gating, table)
    t = best_time(lambda: rt.moe_forward(x, router, gating, table), *_budget(len(x)))
    streamed = len(np.unique(idx)) * views[0].nbytes + router.nbytes
    return {"tokens_per_s": len(x) / t, "seconds": t, "distinct_experts": int(len(np.unique(idx))),
            "streamed_bytes": int(streamed), "ratio_to_bandwidth": streamed / t / bw}


def kernels_table(cfg, threads, bw, batches, modes=MODES, levels=None, log=print):
    """{"torch": {...}, "rows": [{level, mode, n, tokens_per_s, ratio_*}]}; levels default: every SIMD level but scalar."""
    blocks = torch_block(cfg, threads)
    rng = np.random.default_rng(0)
    xs = {n: rng.standard_normal((n, cfg["hidden"]), dtype=np.float32) for n in batches}
    torch_rates = _torch_rates(blocks, xs)
    for (name, n), r in sorted(torch_rates.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        log(f"  {name:10s} n={n:5d} {r:9.0f} tok/s")
    rows = []
    levels = levels or [lv for lv in simd_available() if lv != "scalar"] or ["scalar"]
    with Runtime(threads=threads) as rt, Runtime(threads=threads, w8a8=True) as rt8:
        for mode in modes:
            layer = our_layer(blocks[0], cfg, mode.split("+")[0])
            for level in levels_for(mode, levels):
                with simd_force(level):
                    for n in batches:
                        r = _our_rate(rt8 if mode.endswith("w8a8") else rt, layer, xs[n], bw)
                        r.update(level=level, mode=mode, n=n,
                                 ratio_to_torch_bf16=r["tokens_per_s"] / torch_rates[("torch_bf16", n)],
                                 ratio_to_torch_fp32=r["tokens_per_s"] / torch_rates[("torch_fp32", n)])
                        rows.append(r)
                        log(f"  {mode:10s} {level:6s} n={n:5d} {r['tokens_per_s']:9.0f} tok/s  "
                            f"{r['ratio_to_bandwidth']:.2f} x bw  {r['ratio_to_torch_bf16']:.2f} x torch bf16")
    return {"torch": {f"{name}_n{n}": r for (name, n), r in torch_rates.items()}, "rows": rows,
            "expert_bytes": {m: int(our_layer_bytes(cfg, m)) for m in modes}}


def levels_for(mode, levels):
    """The amx level differs from avx512 only in the w8a8 products: float modes skip it."""
    return [lv for lv in levels if mode.endswith("w8a8") or lv != "amx" or levels == ["amx"]]


def our_layer_bytes(cfg, mode):
    """Bytes of one packed expert in `mode` (without packing real weights)."""
    z = [np.zeros(s, np.float32) for s in ((cfg["inter"], cfg["hidden"]),) * 2 + ((cfg["hidden"], cfg["inter"]),)]
    return pack_expert(*z, mode.split("+")[0])[1].nbytes


def markdown(report):
    """The kernels table of a report as a markdown table (tok/s; ratio to torch bf16 in parentheses)."""
    table, batches = report["table"], report["config"]["batches"]
    head = "| engine | " + " | ".join(f"n={n}" for n in batches) + " |\n|---|" + "---|" * len(batches) + "\n"
    lines = []
    for name in ("torch_bf16", "torch_fp32"):
        lines.append(f"| transformers {name[6:]} | " + " | ".join(f"{table['torch'][f'{name}_n{n}']:,.0f}" for n in batches) + " |")
    keys = sorted({(r["mode"], r["level"]) for r in table["rows"]}, key=lambda k: (MODES.index(k[0]), k[1]))
    for mode, level in keys:
        cells = []
        for n in batches:
            r = next(r for r in table["rows"] if (r["mode"], r["level"], r["n"]) == (mode, level, n))
            cells.append(f"{r['tokens_per_s']:,.0f} ({r['ratio_to_torch_bf16']:.2f}x)")
        lines.append(f"| colibri {mode} ({level}) | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def bandwidth_markdown(report):
    """Batch 1 and 16: streamed bytes (distinct experts) per second as a ratio of the read bandwidth."""
    rows = [r for r in report["table"]["rows"] if r["n"] in (1, 16)]
    out = "| mode (level) | n=1 GB/s | n=1 x bw | n=16 GB/s | n=16 x bw |\n|---|---|---|---|---|\n"
    for mode, level in sorted({(r["mode"], r["level"]) for r in rows}, key=lambda k: (MODES.index(k[0]), k[1])):
        cell = {r["n"]: r for r in rows if (r["mode"], r["level"]) == (mode, level)}
        out += (f"| {mode} ({level}) | " + " | ".join(
            f"{cell[n]['streamed_bytes'] / cell[n]['seconds'] / 1e9:.1f} | {cell[n]['ratio_to_bandwidth']:.2f}"
            for n in (1, 16) if n in cell) + " |\n")
    return out
