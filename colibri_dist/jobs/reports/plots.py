"""The figures every job report shares (matplotlib PNGs, base64 for embedding in report.html).

Role in the data flow: page.render_html (moe-layer, token-classification) and generation_plots.figures
(generate, score) call these: expert heat per layer (tokens routed to each expert), per-worker load over
time (work done between consecutive stats samples, every >= 0.25 s), cache hit rate over time (per
interval and cumulative); figure/labelled/png are the helpers every plot is drawn with. Uses
matplotlib.figure.Figure directly; never opens a window.
"""
import base64
import io

import numpy as np


def png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def figure(w=7.5, h=3.2):
    from matplotlib.figure import Figure   # no pyplot: no global state, no GUI backend
    fig = Figure(figsize=(w, h))
    return fig, fig.subplots()


def labelled(fig, ax, xlabel, ylabel, title, legend=True):
    """Axis labels, title and (when the plot has labelled lines) the legend every figure gets -> png."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(loc="best", fontsize="small")
    return png(fig)


def plot_heat(heat):
    if not heat:
        return None
    layers = sorted(heat, key=int)
    width = max(len(heat[l]) for l in layers)
    grid = np.zeros((len(layers), width))
    for i, l in enumerate(layers):
        grid[i, :len(heat[l])] = heat[l]
    fig, ax = figure(h=1.2 + 0.45 * len(layers))
    from matplotlib.colors import PowerNorm
    im = ax.imshow(grid, aspect="auto", cmap="inferno", interpolation="nearest",
                   norm=PowerNorm(gamma=0.5, vmin=0, vmax=max(grid.max(), 1)))   # sqrt scale: cold experts visible
    ax.set_yticks(range(len(layers)), [f"layer {l}" for l in layers])
    ax.set_xlabel("expert")
    ax.set_title("expert heat: tokens routed to each expert")
    fig.colorbar(im, ax=ax, label="tokens")
    return png(fig)


def plot_worker_load(samples, first_workers):
    if not samples:
        return None
    fig, ax = figure()
    ids = [str(w["id"]) for w in samples[-1]["workers"]]
    t = [s["t"] for s in samples]
    prev = {str(w["id"]): w["tokens"] for w in first_workers}
    series = {i: [] for i in ids}
    for s in samples:
        now = {str(w["id"]): w["tokens"] for w in s["workers"]}
        for i in ids:
            series[i].append(now.get(i, 0) - prev.get(i, 0))
        prev = now
    for i in ids:
        ax.plot(t, series[i], marker=".", label=f"worker {i}")
    return labelled(fig, ax, "time since start (s)", "work per interval (token rows)", "per-worker load over time")


def plot_hit_rate(samples, first_cache):
    if not samples:
        return None
    t, per_batch, cumulative = [], [], []
    prev = first_cache
    for s in samples:
        c = s["cache"]
        dh, dm = c["hits"] - prev["hits"], c["misses"] - prev["misses"]
        th, tm = c["hits"] - first_cache["hits"], c["misses"] - first_cache["misses"]
        t.append(s["t"])
        per_batch.append(dh / (dh + dm) if dh + dm else np.nan)   # per sampling interval
        cumulative.append(th / (th + tm) if th + tm else np.nan)
        prev = c
    fig, ax = figure()
    ax.plot(t, per_batch, ".", alpha=0.6, label="per interval")
    ax.plot(t, cumulative, "-", label="cumulative")
    ax.set_ylim(-0.02, 1.02)
    return labelled(fig, ax, "time since start (s)", "cache hit rate", "expert cache hit rate over time")
