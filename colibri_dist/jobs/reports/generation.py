"""The report of a generate/score job: report.json, report.html and the summary table.

Role in the data flow: run_generation_job builds the report dict (rows, errors, tokens, this run's
GenerationMeter numbers, the demo's task accuracy when the prompts carry `expected`), and calls
`write_all(report, meter, out_dir, report_cfg, stream)` here. The html (figures drawn by generation_plots.py)
is one self-contained page; the summary table goes to the terminal.
"""
import html
import json
import os

from ...fsutil import atomic_write
from .report import hit_rate_text


def _fmt(value, spec="{:,.1f}"):
    return "n/a" if value is None else spec.format(value)


def _ms3(p):
    return " / ".join(_fmt(None if p[k] is None else p[k] * 1e3, "{:,.1f}") for k in ("p50", "p90", "p99")) + " ms"


def summary_rows(rep):
    run = rep.get("this_run", {})
    thr, lat = run.get("throughput", {}), run.get("latency", {})
    rows = [("rows (all shards)", f"{rep['rows']:,}"), ("bad rows (error)", f"{rep['errors']:,}"),
            ("generated tokens", f"{rep['generated_tokens']:,}"), ("input tokens", f"{rep['input_tokens']:,}"),
            ("shards written / total", f"{rep['shards']['written_this_run']} / {rep['shards']['total']}"),
            ("executor", str(rep["job"].get("executor"))), ("startup", _fmt(rep.get("startup_s"), "{:.1f} s")),
            ("elapsed (this run)", _fmt(rep.get("elapsed_s_this_run"), "{:.2f} s"))]
    if thr:
        wall = rep.get("elapsed_s_this_run")
        rows += [("generated tokens/s (wall, this run)",
                  _fmt(thr.get("decode_tokens", 0) / wall if wall else None, "{:,.0f} tok/s")),("decode throughput", _fmt(thr.get("decode_tokens_per_s"), "{:,.0f} tok/s")),
                 ("prefill throughput", _fmt(thr.get("prefill_tokens_per_s"), "{:,.0f} tok/s"))]
    if lat.get("time_to_first_token_s", {}).get("n"):
        rows.append(("time to first token p50/p90/p99", _ms3(lat["time_to_first_token_s"])))
        rows.append(("request latency p50/p90/p99", _ms3(lat["request_latency_s"])))
    cache = run.get("cache")
    if cache:
        rows.append(("expert cache hit rate", hit_rate_text(cache)))
        rows.append(("cache hits / misses / evictions",
                     f"{cache['hits']:,} / {cache['misses']:,} / {cache['evictions']:,}"))
    if run.get("load_imbalance") is not None:
        rows.append(("load imbalance (max/mean)", _fmt(run["load_imbalance"], "{:.2f}")))
    acc = rep.get("task_accuracy")
    if acc:
        rows.append(("task accuracy (demo)", f"{acc['accuracy']:.1%} over {acc['rows']} prompts"))
        rows += [(f"  {task}", f"{a:.1%}") for task, a in sorted(acc["by_task"].items())]
    return rows


def summary_table(rep, out_dir, with_html=True):
    rows = summary_rows(rep)
    width = max(len(k) for k, _ in rows)
    lines = ["", f"colibri run: {rep['job']['kind']} summary", "-" * (width + 28)]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines.append("-" * (width + 28))
    lines.append(f"report: {os.path.join(out_dir, 'report.json')}")
    if with_html:
        lines.append(f"        {os.path.join(out_dir, 'report.html')}")
    return "\n".join(lines)


def write_all(rep, meter, out_dir, report_cfg, stream):
    atomic_write(os.path.join(out_dir, "report.json"), [json.dumps(rep, indent=1).encode()])
    if report_cfg.html:
        atomic_write(os.path.join(out_dir, "report.html"), [render_html(rep, meter).encode()])
    if report_cfg.summary:                  # --progress none hides progress, not the summary and report paths
        print(summary_table(rep, out_dir, report_cfg.html), file=stream, flush=True)


def _figures(rep, meter):
    from .generation_plots import figures
    return figures(rep, meter)


def render_html(rep, meter):
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in summary_rows(rep))
    figures = "".join(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' "
                      f"src='data:image/png;base64,{png}'/>" for title, png in _figures(rep, meter) if png)
    errors = rep.get("error_examples") or []
    err_html = "" if not errors else "<h2>Errors</h2><table><tr><th>row</th><th>error</th></tr>" + "".join(
        f"<tr><td>{html.escape(str(e['id']))}</td><td>{html.escape(e['error'])}</td></tr>" for e in errors) + "</table>"
    workers = (rep.get("this_run") or {}).get("workers") or []
    w_html = "" if not workers else (
        "<h2>Workers</h2><table><tr><th>worker</th><th>work (token rows)</th><th>experts</th><th>cpus</th>"
        "<th>node</th></tr>" + "".join(
            f"<tr><td>{html.escape(str(w['id']))}</td><td>{w['tokens']:,}</td><td>{w['experts']}</td>"
            f"<td>{html.escape(str(w['cpus']))}</td><td>{html.escape(str(w['node']))}</td></tr>" for w in workers)
        + "</table>")
    title = f"colibri run: {html.escape(rep['job']['kind'])}"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;color:#222}}
table{{border-collapse:collapse;margin:1em 0}}th,td{{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:left}}
img{{max-width:100%}}code{{background:#f4f4f4;padding:0 .2em}}</style></head>
<body><h1>{title}</h1>
<p>model <code>{html.escape(str(rep['job'].get('model')))}</code>, config <code>{html.escape(str(rep['job']['config']))}</code></p>
<h2>Summary</h2><table>{rows}</table>
{w_html}{err_html}{figures}
<p>All numbers: <code>report.json</code> in the same directory.</p>
</body></html>
"""
