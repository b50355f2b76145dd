"""report.html: one self-contained page, matplotlib PNGs embedded as base64.

Role in the data flow: report.write_all calls `render_html(report, meter)`.
Plots: expert heat per layer (tokens routed to each expert), per-worker load
over time (work done between consecutive stats samples, every >= 0.25 s), cache hit rate over time
(per batch and cumulative). Uses matplotlib.figure.Figure directly; never opens a window.
"""
import base64
import html
import io

import numpy as np


def _png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _figure(w=7.5, h=3.2):
    from matplotlib.figure import Figure   # no pyplot: no global state, no GUI backend
    fig = Figure(figsize=(w, h))
    return fig, fig.subplots()


def plot_heat(heat):
    if not heat:
        return None
    layers = sorted(heat, key=int)
    width = max(len(heat[l]) for l in layers)
    grid = np.zeros((len(layers), width))
    for i, l in enumerate(layers):
        grid[i, :len(heat[l])] = heat[l]
    fig, ax = _figure(h=1.2 + 0.45 * len(layers))
    from matplotlib.colors import PowerNorm
    im = ax.imshow(grid, aspect="auto", cmap="inferno", interpolation="nearest",
                   norm=PowerNorm(gamma=0.5, vmin=0, vmax=max(grid.max(), 1)))   # sqrt scale: cold experts visible
    ax.set_yticks(range(len(layers)), [f"layer {l}" for l in layers])
    ax.set_xlabel("expert")
    ax.set_title("expert heat: tokens routed to each expert")
    fig.colorbar(im, ax=ax, label="tokens")
    return _png(fig)


def plot_worker_load(samples, first_workers):
    if not samples:
        return None
    fig, ax = _figure()
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
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("work per interval (token rows)")
    ax.set_title("per-worker load over time")
    ax.legend(loc="best", fontsize="small")
    return _png(fig)


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
    fig, ax = _figure()
    ax.plot(t, per_batch, ".", alpha=0.6, label="per interval")
    ax.plot(t, cumulative, "-", label="cumulative")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("cache hit rate")
    ax.set_title("expert cache hit rate over time")
    ax.legend(loc="best", fontsize="small")
    return _png(fig)


def render_html(rep, meter):
    from .report import summary_rows
    plots = [("Expert heat", plot_heat(rep.get("expert_heat"))),
             ("Per-worker load", plot_worker_load(meter.samples, meter.first_stats["workers"])),
             ("Cache hit rate", plot_hit_rate(meter.samples, meter.first_stats["cache"]))]
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in summary_rows(rep))
    workers = "".join(
        f"<tr><td>{html.escape(str(w['id']))}</td><td>{w['tokens']:,}</td><td>{w['experts']}</td>"
        f"<td>{w['cpus']}</td><td>{w['node']}</td></tr>" for w in rep["workers"])
    figures = "".join(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' "
                      f"src='data:image/png;base64,{png}'/>" for title, png in plots if png)
    title = f"colibri run: {html.escape(rep['job']['kind'])}"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;color:#222}}
table{{border-collapse:collapse;margin:1em 0}}th,td{{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:left}}
img{{max-width:100%}}code{{background:#f4f4f4;padding:0 .2em}}</style></head>
<body><h1>{title}</h1>
<p>model <code>{html.escape(str(rep['job']['model']))}</code>, config <code>{html.escape(str(rep['job']['config']))}</code></p>
<h2>Summary</h2><table>{rows}</table>
<h2>Workers</h2><table><tr><th>worker</th><th>work (token rows)</th><th>experts</th><th>cpus</th><th>node</th></tr>{workers}</table>
{figures}
<p>All numbers: <code>report.json</code> in the same directory.</p>
</body></html>
"""
