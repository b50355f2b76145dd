"""The figures of a generate/score job's report.html (matplotlib PNGs, base64 for embedding).

Role in the data flow: page.render_html calls `figures(report, meter)` (through generation.figures); the meter
(reports/metrics.Meter) holds this run's per-step records, per-request TTFT and latency,
and the executor stats samples. Plots: prefill/decode tokens/s over time, TTFT distribution with
p50/p90/p99, request latency distribution, sequences in flight (running, waiting), KV blocks used,
then the MoE views shared with the token-classification report (plots.py): expert heat per
layer, cache hit rate over time, per-worker load. A plot with no data is left out.
"""
import numpy as np

from .plots import figure, labelled, plot_heat, plot_hit_rate, plot_worker_load


def _bins(steps):
    """Time bins over the run: ~60 of them, at least 50 ms wide."""
    t_end = steps[-1][0] if steps else 0.0
    width = max(t_end / 60.0, 0.05)
    return width, int(t_end // width) + 1


def plot_throughput(steps):
    if not steps:
        return None
    width, n = _bins(steps)
    prefill, decode = np.zeros(n), np.zeros(n)
    for t, p, d, *_ in steps:
        i = min(int(t // width), n - 1)
        prefill[i] += p
        decode[i] += d
    x = (np.arange(n) + 0.5) * width
    fig, ax = figure()
    ax.plot(x, decode / width, "-", label="decode")
    ax.plot(x, prefill / width, "-", alpha=0.7, label="prefill")
    return labelled(fig, ax, "time since start (s)", "tokens/s",
                    f"tokens/s over time ({width * 1e3:.0f} ms bins)")


def plot_distribution(values_s, title):
    if not values_s:
        return None
    ms = np.asarray(values_s, dtype=np.float64) * 1e3
    fig, ax = figure()
    ax.hist(ms, bins=min(40, max(5, len(ms) // 2)), color="#4c72b0", alpha=0.8)
    for q, style in ((50, "-"), (90, "--"), (99, ":")):
        v = float(np.percentile(ms, q))
        ax.axvline(v, color="#c44e52", linestyle=style, label=f"p{q} {v:,.1f} ms")
    return labelled(fig, ax, "ms", "requests", title)


def plot_in_flight(steps):
    if not steps:
        return None
    t = [s[0] for s in steps]
    fig, ax = figure()
    ax.step(t, [s[3] for s in steps], where="post", label="running (holding KV blocks)")
    ax.step(t, [s[4] for s in steps], where="post", alpha=0.7, label="waiting")
    return labelled(fig, ax, "time since start (s)", "sequences", "sequences in flight after each step")


def plot_kv_blocks(steps, total):
    if not steps or not total:
        return None
    t = [s[0] for s in steps]
    fig, ax = figure()
    ax.step(t, [total - s[5] for s in steps], where="post")
    ax.axhline(total, color="grey", linestyle="--", label=f"all {total} blocks")
    ax.set_ylim(0, total * 1.05)
    return labelled(fig, ax, "time since start (s)", "KV blocks used", "KV cache blocks in use")


def figures(rep, meter):
    """[(title, png base64 or None)] in page order."""
    run = rep.get("this_run", {})
    out = [("Tokens/s over time", plot_throughput(meter.steps)),
           ("Time to first token", plot_distribution(meter.ttft, "time to first token per request")),
           ("Request latency", plot_distribution(meter.latency, "request latency (arrival to finish)")),
           ("Sequences in flight", plot_in_flight(meter.steps)),
           ("KV blocks used", plot_kv_blocks(meter.steps, meter.kv_blocks)),
           ("Expert heat", plot_heat(run.get("expert_heat")))]
    if meter.first_stats is not None:
        out += [("Cache hit rate", plot_hit_rate(meter.samples, meter.first_stats["cache"])),
                ("Per-worker load", plot_worker_load(meter.samples, meter.first_stats["workers"]))]
    return out
