"""The job report, every kind: report.json (numbers), report.html (figures), the summary table.

Role in the data flow: the runner hands over the plan (its manifest holds every shard, those of earlier
resumed runs too), this run's Meter and what it knows of the run (shards written, elapsed, startup,
executor, model). `build_report` makes the fields every kind shares and asks the kind for its own
(kind.report_fields: the MoE kinds' cache/workers/heat/batch latency at the top, generate/score's
`this_run`); `finish` adds the bad rows' examples, the runs of the earlier resumed runs and the demo's
extra fields, says the bad-row count, and writes report.json, report.html (page.py, with the kind's
figures) and the summary table (the kind's rows). Fields: docs/CONFIG.md "report.json fields".
"""
import json
import os

from ...fsutil import atomic_write
from .metrics import cache_section, load_imbalance, percentiles, summary_table, worker_section

EXIT_ROW_ERRORS = 3
EXAMPLES = 20


def cache_unlimited(cfg):
    """No RAM cache budget (experts served from the mmap): there is nothing to hit or miss."""
    from ..run.executors import attaches_to_named_pool
    return cfg.pool.cache_bytes is None and not attaches_to_named_pool(cfg)


def without_limit(cache, cfg):
    """The cache section, its hit rate withheld (None, `no_limit: true`) when no cache limit is set."""
    if cache is not None and cache_unlimited(cfg):
        cache["hit_rate"], cache["no_limit"] = None, True
    return cache


def build_report(cfg, kind, manifest, meter, run):
    """run: {"written": shards written this run, "elapsed_s", "startup_s", "executor", "model"}."""
    done = list(manifest.done.values())
    meter.finish()
    rep = {"job": {"kind": cfg.job.kind, "config": os.path.abspath(cfg.source) if cfg.source else None,
                   "model": run["model"], "executor": run["executor"]},
           "rows": int(sum(i["rows"] for i in done)), "errors": int(sum(i.get("errors", 0) for i in done)),
           "shards": {"total": len(manifest.shard_names), "written_this_run": run["written"]},
           "complete": len(manifest.done) == len(manifest.shard_names), "startup_s": run["startup_s"]}
    kind.report_fields(rep, cfg, done, meter, run)
    return rep


def executor_sections(meter, cfg):
    """cache, workers, load imbalance and expert heat over this run ({} without an executor view)."""
    if meter.first_stats is None:
        return {}
    first, last = meter.first_stats, meter.samples[-1]
    workers = worker_section(first["workers"], last["workers"])
    return {"cache": without_limit(cache_section(first["cache"], last["cache"]), cfg), "workers": workers,
            "load_imbalance": load_imbalance(workers), "expert_heat": meter.heat_report()}


def moe_fields(rep, cfg, done, meter, run):
    """The report fields of the kinds that run rows through the MoE executor (moe-layer, token-classification)."""
    rep["job"]["batch_tokens"] = cfg.job.batch_tokens
    rep["shards"]["resumed"] = rep["shards"]["total"] - run["written"]
    elapsed = meter.elapsed_s
    rep.update(tokens=int(sum(i["tokens"] for i in done)), tokens_this_run=int(meter.tokens),
               elapsed_s=float(elapsed), tokens_per_s=float(meter.tokens / elapsed) if elapsed > 0 else None,
               batch_latency_ms=percentiles(meter.latencies_ms, "batches"), **executor_sections(meter, cfg),
               faults={"retries": int(meter.final_stats.get("retries", 0)) - int(meter.first_stats.get("retries", 0))})
    if meter.labelled:
        rep["accuracy"] = {"labelled_tokens": meter.labelled, "correct": meter.correct,
                           "accuracy": meter.correct / meter.labelled}


def finish(cfg, kind, plan, rep, meter, stream, extra=None):
    """Errors, the earlier runs of a resumed job, the demo's extra fields -> report.json/html + summary."""
    rep["error_examples"] = error_examples(plan.manifest)
    rep["runs"] = (_earlier_runs(plan.out_dir) if plan.resumed else []) + [run_entry(rep, kind)]
    if extra is not None:
        rep.update(extra(plan.out_dir, plan.paths) or {})
    print_error_count(rep, stream)
    write_all(rep, meter, plan.out_dir, cfg.report, stream, kind)
    return rep


def run_entry(rep, kind):
    """One run's line in report["runs"] (a resumed job keeps every earlier run's)."""
    run = rep.get("this_run", rep)
    return {"shards_written": rep["shards"]["written_this_run"],
            "elapsed_s": rep.get("elapsed_s_this_run", rep.get("elapsed_s")), "startup_s": rep.get("startup_s"),
            "executor": rep["job"].get("executor"), **{k: run.get(k) for k in kind.run_keys}}


def _earlier_runs(out_dir):
    try:
        with open(os.path.join(out_dir, "report.json"), encoding="utf-8") as fh:
            old = json.load(fh)
    except (OSError, ValueError):
        old = None
    return old.get("runs") if isinstance(old, dict) and isinstance(old.get("runs"), list) else []


def error_examples(manifest, limit=EXAMPLES):
    """The first `limit` bad rows over the shards written: {id, where (file:line), error}."""
    out = []
    for name in manifest.shard_names:
        out += (manifest.done.get(name) or {}).get("error_examples") or []
    return out[:limit]


def print_error_count(rep, stream):
    """The bad rows first, before the summary, with where the first one is and what to do next."""
    n = rep.get("errors") or 0
    if not n:
        return
    first = (rep.get("error_examples") or [{}])[0]
    where = f"{first.get('where')}: row {first.get('id')!r}: " if first.get("where") else ""
    accepted = rep["job"].get("on_error") == "continue"
    print(f"colibri: {n} of {rep['rows']} rows failed (first: {where}{first.get('error')}); each has an "
          f"`error` output row, and report.json `error_examples` lists them. "
          + ("job.on_error: continue accepts them (exit 0)." if accepted else
             f"Exit code {EXIT_ROW_ERRORS}: fix those rows and rerun with --restart, or set job.on_error: continue "
             f"to accept them."), file=stream, flush=True)


def write_all(rep, meter, out_dir, report_cfg, stream, kind):
    """report.json, report.html (page.render_html with the kind's figures) and the kind's summary table."""
    atomic_write(os.path.join(out_dir, "report.json"), [json.dumps(rep, indent=1).encode()])
    if report_cfg.html:
        from .page import render_html
        atomic_write(os.path.join(out_dir, "report.html"), [render_html(rep, meter, kind).encode()])
    if report_cfg.summary:                  # --progress none hides progress, not the summary and report paths
        print(summary_table(f"colibri run: {rep['job']['kind']} summary", kind.summary_rows(rep), out_dir,
                            report_cfg.html), file=stream, flush=True)
