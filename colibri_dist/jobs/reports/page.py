"""report.html: one self-contained page, matplotlib PNGs embedded as base64, every kind.

Role in the data flow: report.write_all calls `render_html(report, meter, kind)`: the title, the kind's
summary rows, its workers, the first bad rows, then the kind's figures (`kind.figures(report, meter)`:
moe_figures below for the MoE kinds, generation_plots.figures for generate/score). The figures are drawn
by plots.py and generation_plots.py; this module only lays them out.
"""
import html

from .plots import plot_heat, plot_hit_rate, plot_worker_load

_STYLE = """body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:left}
img{max-width:100%}code{background:#f4f4f4;padding:0 .2em}"""


def table(rows):
    """[(key, value text)] -> the rows of a two-column table."""
    return "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)


def figures(plots):
    """[(title, png base64 or None)] -> one heading + image per figure that has data."""
    return "".join(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' "
                   f"src='data:image/png;base64,{png}'/>" for title, png in plots if png)


def workers_table(workers):
    """The per-worker table (empty string without workers)."""
    if not workers:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(str(w['id']))}</td><td>{w['tokens']:,}</td><td>{w['experts']}</td>"
        f"<td>{html.escape(str(w['cpus']))}</td><td>{html.escape(str(w['node']))}</td></tr>" for w in workers)
    return ("<h2>Workers</h2><table><tr><th>worker</th><th>work (token rows)</th><th>experts</th><th>cpus</th>"
            f"<th>node</th></tr>{rows}</table>")


def page(rep, summary, body):
    """The whole page: title from the job kind, model and config, the summary table, then `body`."""
    title = f"colibri run: {html.escape(rep['job']['kind'])}"
    model, config = html.escape(str(rep["job"].get("model"))), html.escape(str(rep["job"]["config"]))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>{_STYLE}</style></head>
<body><h1>{title}</h1>
<p>model <code>{model}</code>, config <code>{config}</code></p>
<h2>Summary</h2><table>{table(summary)}</table>
{body}
<p>All numbers: <code>report.json</code> in the same directory.</p>
</body></html>
"""


def errors_table(errors):
    """The first bad rows (empty string without any)."""
    if not errors:
        return ""
    rows = "".join(f"<tr><td>{html.escape(str(e['id']))}</td><td>{html.escape(e['error'])}</td></tr>" for e in errors)
    return f"<h2>Errors</h2><table><tr><th>row</th><th>error</th></tr>{rows}</table>"


def render_html(rep, meter, kind):
    body = workers_table(kind.workers(rep)) + errors_table(rep.get("error_examples"))
    return page(rep, kind.summary_rows(rep), body + figures(kind.figures(rep, meter)))


def moe_figures(rep, meter):
    """The figures of the MoE kinds (moe-layer, token-classification)."""
    return [("Expert heat", plot_heat(rep.get("expert_heat"))),
            ("Per-worker load", plot_worker_load(meter.samples, meter.first_stats["workers"])),
            ("Cache hit rate", plot_hit_rate(meter.samples, meter.first_stats["cache"]))]
