"""Per-expert decode/prefill shapes: int4 weight-only vs int4 w4a8 vs int8 (w8a8), GB/s vs read bandwidth.

Role: the `expert_shapes` section of `python -m colibri_dist.bench kernels`. One OLMoE-sized
expert (hidden x inter) is packed once per scheme and copied into enough distinct buffers to
exceed the last-level cache; each timed call runs one expert_forward on the next copy, so the
weights stream from memory as in decode. Rows: mode x tokens per expert (1, 2, 4, 8, 16, 32 and
a prefill-sized block), seconds per expert, weight GB/s and its ratio to the read bandwidth
measured in the same run, the process CPU time per expert (robust on a shared machine), and the
speed-up in CPU time over the same scheme weight-only at that token count.
"""
import time

import numpy as np

from ...format.quantize import pack_expert
from ...native import Runtime, expert_view

MODES = ["int4-g64", "int4-g64+w4a8", "int4-g32", "int4-g32+w4a8", "int8", "int8+w8a8"]
TOKENS = [1, 2, 4, 8, 16, 32, 256]


def _copies(scheme, hidden, inter, min_bytes, rng):
    w = [(rng.standard_normal(s, dtype=np.float32) * 0.02) for s in ((inter, hidden), (inter, hidden), (hidden, inter))]
    blob, layout = pack_expert(*w, scheme)
    n = max(2, -(-min_bytes // blob.nbytes))
    return [expert_view(blob.copy(), layout) for _ in range(n)]


def _time_pass(rt, views, x, passes):
    """Best over `passes` of (wall time, process CPU time) of one call on each copy in turn, / copies.
    CPU time is the robust figure on a shared machine: it counts only the time this process ran."""
    best, best_cpu = float("inf"), float("inf")
    for _ in range(passes):
        t, c = time.perf_counter(), time.process_time()
        for v in views:
            rt.expert_forward(x, v)
        best = min(best, (time.perf_counter() - t) / len(views))
        best_cpu = min(best_cpu, (time.process_time() - c) / len(views))
    return best, best_cpu


def expert_shapes(threads, bw, hidden=2048, inter=1024, tokens=TOKENS, modes=MODES, min_bytes=96 << 20,
                  passes=3, log=print):
    """[{mode, tokens, seconds, gb_per_s, ratio_to_bandwidth, speedup_vs_weight_only (same scheme)}]."""
    rng = np.random.default_rng(5)
    xs = {n: rng.standard_normal((n, hidden), dtype=np.float32) for n in tokens}
    views = {s: _copies(s, hidden, inter, min_bytes, rng) for s in dict.fromkeys(m.split("+")[0] for m in modes)}
    rows = []
    with Runtime(threads=threads) as rt, Runtime(threads=threads, w8a8=True) as rt8:
        for n in tokens:
            for mode in modes:
                vs = views[mode.split("+")[0]]
                r = rt8 if "+" in mode else rt
                r.expert_forward(xs[n], vs[0])                  # warm the arena
                t, cpu = _time_pass(r, vs, xs[n], passes if n <= 32 else 1)
                rows.append({"mode": mode, "tokens": n, "seconds": t, "cpu_seconds": cpu, "expert_bytes": vs[0].nbytes,
                             "gb_per_s": vs[0].nbytes / t / 1e9, "ratio_to_bandwidth": vs[0].nbytes / t / bw})
            base = {r["mode"]: r["cpu_seconds"] for r in rows if r["tokens"] == n and "+" not in r["mode"]}
            for r in rows[-len(modes):]:
                r["speedup_vs_weight_only"] = base.get(r["mode"].split("+")[0], r["cpu_seconds"]) / r["cpu_seconds"]
                log(f"  {r['mode']:14s} tokens {n:4d}: {r['seconds'] * 1e6:8.0f} us/expert (cpu {r['cpu_seconds'] * 1e6:6.0f})"
                    f"  {r['gb_per_s']:5.1f} GB/s = {r['ratio_to_bandwidth']:.2f} x bw  "
                    f"{r['speedup_vs_weight_only']:.2f} x its weight-only (cpu time)")
    return rows


def shapes_markdown(rows):
    """Rows as a markdown table: us per expert wall (GB/s, x bandwidth; CPU us) per mode and token count."""
    tokens = sorted({r["tokens"] for r in rows})
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    out = "| mode | " + " | ".join(f"{n} tok" for n in tokens) + " |\n|---|" + "---|" * len(tokens) + "\n"
    for m in modes:
        cells = []
        for n in tokens:
            r = next(r for r in rows if r["mode"] == m and r["tokens"] == n)
            cells.append(f"{r['seconds'] * 1e6:,.0f} us ({r['gb_per_s']:.1f} GB/s, {r['ratio_to_bandwidth']:.2f}x; "
                         f"cpu {r['cpu_seconds'] * 1e6:,.0f})")
        out += f"| {m} | " + " | ".join(cells) + " |\n"
    return out
