"""What a job measures while it runs: batch latencies, expert heat, time series of executor stats.

Role in the data flow: the job kinds wrap each batch in `meter.batch(tokens)`;
the meter times it, samples the executor's normalized stats after it (cache
counters, per-worker work) and keeps everything report.py needs to build
report.json and the plots. The numbers the reports derive from the stats
(percentiles, cache and worker sections, load imbalance) and the summary
rows both report.html and the terminal show are here too, so report.py and
page.py both import this module and not each other. Nothing here touches
the model or the outputs.
"""
import os
import time
from contextlib import contextmanager

import numpy as np


class Meter:
    def __init__(self, executor, n_experts_by_layer, heat=True, sample_every_s=0.25):
        self.executor = executor
        self.sample_every_s = sample_every_s   # executor stats cost a round trip on a pool: not every batch
        self.heat_enabled = heat
        self._experts = dict(n_experts_by_layer)
        if heat:
            executor.count_heat()              # counted where the executor routes (routing/heat.py)
        self.latencies_ms = []
        self.samples = []          # per batch: {"t", "tokens", "cache", "workers"}
        self.tokens = 0            # tokens processed in this run
        self.rows = 0
        self.labelled = 0
        self.correct = 0
        self.shards_written = []
        self.t0 = time.perf_counter()
        self.t_end = None
        self.first_stats = executor.stats()

    @contextmanager
    def batch(self, tokens):
        start = time.perf_counter()
        yield
        now = time.perf_counter()
        self.latencies_ms.append((now - start) * 1e3)
        self.tokens += tokens
        if not self.samples or now - self.t0 - self.samples[-1]["t"] >= self.sample_every_s:
            self.sample()

    def sample(self):
        stats = self.executor.stats()
        self.samples.append({"t": time.perf_counter() - self.t0, "tokens": self.tokens,
                             "cache": stats["cache"], "workers": stats["workers"]})
        return stats

    @property
    def heat(self):
        """{layer: tokens routed to each expert}, counted where the executor routes (every layer of the job,
        zeros where none went; longer where experts were hot-added)."""
        seen = {int(k): v for k, v in (self.executor.heat_report() or {}).items()}
        out = {}
        for layer, n in self._experts.items():
            counts = seen.get(layer, [])
            row = np.zeros(max(n, len(counts)), dtype=np.int64)
            row[:len(counts)] = counts
            out[layer] = row
        return out

    def add_accuracy(self, correct, labelled):
        self.correct += int(correct)
        self.labelled += int(labelled)

    def finish(self):
        self.t_end = time.perf_counter()
        return self.sample()

    @property
    def elapsed_s(self):
        return (self.t_end or time.perf_counter()) - self.t0

    def hit_rate(self):
        """Cache hit rate over this run so far (None before any lookup)."""
        if not self.samples:
            return None
        cache = delta_cache(self.first_stats["cache"], self.samples[-1]["cache"])
        total = cache["hits"] + cache["misses"]
        return cache["hits"] / total if total else None


CACHE_KEYS = ("hits", "misses", "evictions", "bytes_loaded")


def delta_cache(before, after):
    return {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in CACHE_KEYS}


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


def hit_rate_text(cache):
    return "n/a (no cache limit: experts served from the mmap)" if cache.get("no_limit") else \
        fmt(cache["hit_rate"], "{:.1%}")


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


def fmt(value, spec="{:,.1f}"):
    return "n/a" if value is None else spec.format(value)


def summary_rows(rep):
    lat, cache = rep["batch_latency_ms"], rep["cache"]
    rows = [("tokens (all shards)", f"{rep['tokens']:,}"), ("rows", f"{rep['rows']:,}"),
            ("tokens this run", f"{rep['tokens_this_run']:,}"),
            ("shards written / resumed", f"{rep['shards']['written_this_run']} / {rep['shards']['resumed']}"),
            ("executor", rep["job"]["executor"]),
            ("startup", fmt(rep["startup_s"], "{:.1f} s")),
            ("throughput", fmt(rep["tokens_per_s"], "{:,.0f} tok/s")),
            ("batch latency p50/p90/p99", " / ".join(fmt(lat[k], "{:.1f}") for k in ("p50", "p90", "p99")) + " ms"),
            ("cache hit rate", hit_rate_text(cache)),
            ("cache hits / misses / evictions", f"{cache['hits']:,} / {cache['misses']:,} / {cache['evictions']:,}"),
            ("bytes loaded", f"{cache['bytes_loaded'] / 2**20:,.1f} MiB"),
            ("load imbalance (max/mean)", fmt(rep["load_imbalance"], "{:.2f}")),
            ("retries", str(rep["faults"]["retries"]))]
    if "accuracy" in rep:
        rows.append(("accuracy vs labels", f"{rep['accuracy']['accuracy']:.1%}"))
    return rows


def summary_table(title, rows, out_dir, html=True, pad=24):
    """The summary the terminal gets: `title`, one aligned row per (key, value), the report paths."""
    width = max(len(k) for k, _ in rows)
    rule = "-" * (width + pad)
    lines = ["", title, rule] + [f"{k.ljust(width)}  {v}" for k, v in rows] + [rule]
    lines.append(f"report: {os.path.join(out_dir, 'report.json')}")
    if html:
        lines.append(f"        {os.path.join(out_dir, 'report.html')}")
    return "\n".join(lines)
