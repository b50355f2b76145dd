"""The report of a generate/score job: report.json, report.html and the summary table.

Role in the data flow: run_generation_job builds the report dict (rows, errors, tokens, this run's
GenerationMeter numbers, the demo's task accuracy when the prompts carry `expected`), and calls
`write_all(report, meter, out_dir, report_cfg, stream)` here, which writes through report.write_all with this
kind's rows and page: the html (page.py's shell, figures drawn by generation_plots.py) is one self-contained
page; the summary table goes to the terminal.
"""
import html

from . import report
from .metrics import fmt as _fmt, hit_rate_text
from .page import figures, page, workers_table


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
                  _fmt(thr.get("decode_tokens", 0) / wall if wall else None, "{:,.0f} tok/s")),
                 ("decode throughput", _fmt(thr.get("decode_tokens_per_s"), "{:,.0f} tok/s")),
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


def write_all(rep, meter, out_dir, report_cfg, stream):
    report.write_all(rep, meter, out_dir, report_cfg, stream, render=render_html, rows=summary_rows, indent=1, pad=28)


def _figures(rep, meter):
    from .generation_plots import figures as plots
    return plots(rep, meter)


def render_html(rep, meter):
    errors = rep.get("error_examples") or []
    err_html = "" if not errors else "<h2>Errors</h2><table><tr><th>row</th><th>error</th></tr>" + "".join(
        f"<tr><td>{html.escape(str(e['id']))}</td><td>{html.escape(e['error'])}</td></tr>" for e in errors) + "</table>"
    workers = (rep.get("this_run") or {}).get("workers") or []
    return page(rep, summary_rows(rep), workers_table(workers) + err_html + figures(_figures(rep, meter)))
