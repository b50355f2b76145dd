"""The kernels table: one OLMoE-sized MoE layer, tokens/s at several batch sizes, every mode and SIMD level.

Role: the speed half of `python -m colibri_dist.bench kernels`. One set of random
weights (normal, std 0.02) feeds the transformers OlmoeSparseMoeBlock in fp32 and
bf16 (torch's own CPU kernels, oneDNN) and our layer in each weight mode
(int8 weight-only, int8 + w8a8, int4-g32/g64 weight-only and + w4a8) on each SIMD level this CPU
has. Ratios are taken in the same run: against the read bandwidth (bytes of the
distinct experts a call streams / time) and against the two torch blocks.
"""
import time

import numpy as np

from ...format.quantize import pack_expert
from ...native import ExpertTable, Gating, Runtime, expert_view, simd_available, simd_force

MODES = ["int8", "int8+w8a8", "int4-g32", "int4-g32+w4a8", "int4-g64", "int4-g64+w4a8"]


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
    """(repeats, min seconds) per measurement in one round: short calls repeat, long ones run once or twice."""
    if QUICK_BUDGET:
        return 1, 0.0
    return (8, 0.3) if n <= 16 else (2, 0.0) if n <= 256 else (1, 0.0)


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


def _torch_fns(blocks, xs):
    """{(name, n): call} for the fp32 and bf16 blocks."""
    import torch
    fns = {}
    for name, block, dtype in (("torch_fp32", blocks[0], torch.float32), ("torch_bf16", blocks[1], torch.bfloat16)):
        for n, x in xs.items():
            xt = torch.from_numpy(x)[None].to(dtype)

            def call(block=block, xt=xt):
                with torch.no_grad():
                    block(xt)
            fns[(name, n)] = call
    return fns


def _our_fns(rt, rt8, layers, xs, levels):
    """{(mode, level, n): (call, distinct experts, streamed bytes)} for every mode x level x batch."""
    fns = {}
    for mode, (router, gating, table, views) in layers.items():
        r = rt8 if "+" in mode else rt              # +w8a8 / +w4a8: the w8a8 switch
        for n, x in xs.items():
            _, idx, _ = r.moe_forward(x, router, gating, table)
            distinct = int(len(np.unique(idx)))
            for level in levels_for(mode, levels):
                def call(r=r, x=x, level=level, router=router, gating=gating, table=table):
                    with simd_force(level):
                        r.moe_forward(x, router, gating, table)
                fns[(mode, level, n)] = (call, distinct, distinct * views[0].nbytes + router.nbytes)
    return fns


def _rounds(calls, rounds):
    """Best time of every call, measured round-robin `rounds` times (a shared machine's load spreads
    over all configurations instead of hitting one)."""
    best = {}
    for _ in range(rounds):
        for key, fn in calls.items():
            fn()                                   # warm (and, the first time, grow the arena)
            best[key] = min(best.get(key, float("inf")), best_time(fn, *_budget(key[-1])))
    return best


def kernels_table(cfg, threads, bw, batches, modes=MODES, levels=None, log=print, rounds=3):
    """{"torch": {...}, "rows": [{level, mode, n, tokens_per_s, ratio_*}]}; levels default: every SIMD level but scalar."""
    blocks = torch_block(cfg, threads)
    rng = np.random.default_rng(0)
    xs = {n: rng.standard_normal((n, cfg["hidden"]), dtype=np.float32) for n in batches}
    levels = levels or [lv for lv in simd_available() if lv != "scalar"] or ["scalar"]
    packed = {scheme: our_layer(blocks[0], cfg, scheme) for scheme in dict.fromkeys(m.split("+")[0] for m in modes)}
    layers = {mode: packed[mode.split("+")[0]] for mode in modes}      # int8 and int8+w8a8 share the weights
    with Runtime(threads=threads) as rt, Runtime(threads=threads, w8a8=True) as rt8:
        ours = _our_fns(rt, rt8, layers, xs, levels)
        calls = dict(_torch_fns(blocks, xs))
        calls.update({k: v[0] for k, v in ours.items()})
        best = _rounds(calls, rounds)
    torch_rates = {k: k[1] / best[k] for k in calls if k[0].startswith("torch")}
    for (name, n), r in sorted(torch_rates.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        log(f"  {name:10s} n={n:5d} {r:9.0f} tok/s")
    rows = []
    for (mode, level, n), (_, distinct, streamed) in ours.items():
        t = best[(mode, level, n)]
        r = {"level": level, "mode": mode, "n": n, "tokens_per_s": n / t, "seconds": t, "distinct_experts": distinct,
             "streamed_bytes": int(streamed), "ratio_to_bandwidth": streamed / t / bw,
             "ratio_to_torch_bf16": n / t / torch_rates[("torch_bf16", n)],
             "ratio_to_torch_fp32": n / t / torch_rates[("torch_fp32", n)]}
        rows.append(r)
        log(f"  {mode:10s} {level:6s} n={n:5d} {r['tokens_per_s']:9.0f} tok/s  "
            f"{r['ratio_to_bandwidth']:.2f} x bw  {r['ratio_to_torch_bf16']:.2f} x torch bf16")
    return {"torch": {f"{name}_n{n}": r for (name, n), r in torch_rates.items()}, "rows": rows, "rounds": rounds,
            "expert_bytes": {m: int(our_layer_bytes(cfg, m)) for m in modes}}


def levels_for(mode, levels):
    """The amx level differs from avx512 only in the w8a8 products: the other modes skip it."""
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
