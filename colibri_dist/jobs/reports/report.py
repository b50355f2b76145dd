"""The job report: report.json (numbers), report.html (plots embedded as PNG), a summary table.

Role in the data flow: the runner hands over the Meter (what this run measured),
the executor's final normalized stats and the manifest (all shards, including
ones written by an earlier, resumed run); this module turns them into the
fields documented in docs/CONFIG.md "Report" and writes them to the output dir
(write_all: the generate/score report writes through it too).
"""
import json
import os

from ...fsutil import atomic_write
from .metrics import cache_section, load_imbalance, percentiles, summary_rows, summary_table, worker_section


def cache_unlimited(cfg):
    """No RAM cache budget (experts served from the mmap): there is nothing to hit or miss."""
    from ..run.executors import attaches_to_named_pool
    return cfg.pool.cache_bytes is None and not attaches_to_named_pool(cfg)


def without_limit(cache, cfg):
    """The cache section, its hit rate withheld (None, `no_limit: true`) when no cache limit is set."""
    if cache is not None and cache_unlimited(cfg):
        cache["hit_rate"], cache["no_limit"] = None, True
    return cache


def build_report(cfg, meter, final_stats, manifest, executor_kind, startup_s, model_path):
    done = manifest.done.values()
    workers = worker_section(meter.first_stats["workers"], final_stats["workers"])
    compute_s = meter.elapsed_s
    rep = {
        "job": {"kind": cfg.job.kind, "config": os.path.abspath(cfg.source) if cfg.source else None,
                "model": os.path.abspath(model_path), "executor": executor_kind,
                "batch_tokens": cfg.job.batch_tokens},
        "rows": int(sum(i["rows"] for i in done)),
        "tokens": int(sum(i["tokens"] for i in done)),
        "tokens_this_run": int(meter.tokens),
        "shards": {"total": len(manifest.shard_names), "written_this_run": len(meter.shards_written),
                   "resumed": len(manifest.shard_names) - len(meter.shards_written)},
        "complete": len(manifest.done) == len(manifest.shard_names),
        "startup_s": float(startup_s),
        "elapsed_s": float(compute_s),
        "tokens_per_s": float(meter.tokens / compute_s) if compute_s > 0 else None,
        "batch_latency_ms": percentiles(meter.latencies_ms),
        "cache": without_limit(cache_section(meter.first_stats["cache"], final_stats["cache"]), cfg),
        "load_imbalance": load_imbalance(workers),
        "workers": workers,
        "faults": {"retries": int(final_stats.get("retries", 0)) - int(meter.first_stats.get("retries", 0))},
        "expert_heat": {str(layer): counts.tolist() for layer, counts in meter.heat.items()}
        if meter.heat_enabled else None,
    }
    if meter.labelled:
        rep["accuracy"] = {"labelled_tokens": meter.labelled, "correct": meter.correct,
                           "accuracy": meter.correct / meter.labelled}
    return rep


def write_all(rep, meter, out_dir, report_cfg, stream, render=None, rows=None, indent=2, pad=24):
    """report.json, report.html (render(rep, meter) -> the page; default: page.render_html) and the
    summary table (rows(rep); default: metrics.summary_rows) on `stream`. Shared by every job kind."""
    atomic_write(os.path.join(out_dir, "report.json"), [json.dumps(rep, indent=indent).encode()])
    if report_cfg.html:
        if render is None:
            from .page import render_html as render
        atomic_write(os.path.join(out_dir, "report.html"), [render(rep, meter).encode()])
    if report_cfg.summary:                  # --progress none hides progress, not the summary and report paths
        title = f"colibri run: {rep['job']['kind']} summary" if rows else "colibri run: summary"
        print(summary_table(title, (rows or summary_rows)(rep), out_dir, report_cfg.html, pad), file=stream,
              flush=True)
