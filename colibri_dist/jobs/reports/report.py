"""The job report: report.json (numbers), report.html (plots embedded as PNG), a summary table.

Role in the data flow: the runner hands over the Meter (what this run measured),
the executor's final normalized stats and the manifest (all shards, including
ones written by an earlier, resumed run); this module turns them into the
fields documented in docs/CONFIG.md "Report" and writes them to the output dir.
"""
import json
import os

import numpy as np

from .metrics import delta_cache
from ...fsutil import atomic_write


def percentiles(values):
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "batches": 0}
    arr = np.asarray(values, dtype=np.float64)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(arr.mean()),
            "batches": len(values)}


def cache_section(first, final):
    cache = delta_cache(first, final)
    lookups = cache["hits"] + cache["misses"]
    cache["hit_rate"] = cache["hits"] / lookups if lookups else None
    return cache


def cache_unlimited(cfg):
    """No RAM cache budget (experts served from the mmap): there is nothing to hit or miss."""
    from ..run.executors import attaches_to_named_pool
    return cfg.pool.cache_bytes is None and not attaches_to_named_pool(cfg)


def without_limit(cache, cfg):
    """The cache section, its hit rate withheld (None, `no_limit: true`) when no cache limit is set."""
    if cache is not None and cache_unlimited(cfg):
        cache["hit_rate"], cache["no_limit"] = None, True
    return cache


def hit_rate_text(cache):
    return "n/a (no cache limit: experts served from the mmap)" if cache.get("no_limit") else \
        _fmt(cache["hit_rate"], "{:.1%}")


def worker_section(first_workers, final_workers):
    before = {str(w["id"]): w for w in first_workers}
    out = []
    for w in final_workers:
        start = before.get(str(w["id"]), {}).get("tokens", 0)
        out.append({"id": w["id"], "tokens": int(w["tokens"]) - int(start), "experts": w["experts"],
                    "cpus": w["cpus"], "node": w["node"]})
    return out


def load_imbalance(workers):
    work = [w["tokens"] for w in workers]
    mean = float(np.mean(work)) if work else 0.0
    return float(max(work) / mean) if mean > 0 else None


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


def write_all(rep, meter, out_dir, report_cfg, stream):
    data = json.dumps(rep, indent=2).encode()
    atomic_write(os.path.join(out_dir, "report.json"), [data])
    if report_cfg.html:
        from .page import render_html
        html = render_html(rep, meter).encode()
        atomic_write(os.path.join(out_dir, "report.html"), [html])
    if report_cfg.summary:
        print(summary_table(rep, out_dir, report_cfg.html), file=stream, flush=True)


def _fmt(value, spec="{:,.1f}"):
    return "n/a" if value is None else spec.format(value)


def summary_rows(rep):
    lat, cache = rep["batch_latency_ms"], rep["cache"]
    rows = [("tokens (all shards)", f"{rep['tokens']:,}"), ("rows", f"{rep['rows']:,}"),
            ("tokens this run", f"{rep['tokens_this_run']:,}"),
            ("shards written / resumed", f"{rep['shards']['written_this_run']} / {rep['shards']['resumed']}"),
            ("executor", rep["job"]["executor"]),
            ("startup", _fmt(rep["startup_s"], "{:.1f} s")),
            ("throughput", _fmt(rep["tokens_per_s"], "{:,.0f} tok/s")),
            ("batch latency p50/p90/p99", " / ".join(_fmt(lat[k], "{:.1f}") for k in ("p50", "p90", "p99")) + " ms"),
            ("cache hit rate", hit_rate_text(cache)),
            ("cache hits / misses / evictions", f"{cache['hits']:,} / {cache['misses']:,} / {cache['evictions']:,}"),
            ("bytes loaded", f"{cache['bytes_loaded'] / 2**20:,.1f} MiB"),
            ("load imbalance (max/mean)", _fmt(rep["load_imbalance"], "{:.2f}")),
            ("retries", str(rep["faults"]["retries"]))]
    if "accuracy" in rep:
        rows.append(("accuracy vs labels", f"{rep['accuracy']['accuracy']:.1%}"))
    return rows


def summary_table(rep, out_dir, html=True):
    rows = summary_rows(rep)
    width = max(len(k) for k, _ in rows)
    lines = ["", "colibri run: summary", "-" * (width + 24)]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines.append("-" * (width + 24))
    lines.append(f"report: {os.path.join(out_dir, 'report.json')}")
    if html:
        lines.append(f"        {os.path.join(out_dir, 'report.html')}")
    return "\n".join(lines)
