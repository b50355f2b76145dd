"""What one run of a job measures, every kind: one Meter, and the numbers the reports derive from it.

Role in the data flow: the runner asks the kind for its Meter (kind.meter(engine, heat)), given the executor
view of where the MoE layers run (run/executors.py: stats(), count_heat(), heat_report(); None for a stand-in
LLM). The kinds feed it what they count:
    batch(tokens)       a context around one batch through the MoE layers (moe-layer, token-classification):
                        its latency, tokens, a stats sample when due
    on_step(step)       one scheduler step (generate, score; StepStats): prefill/decode tokens, running,
                        waiting, free KV blocks, per-second buckets
    add_results(rs)     finished requests: time to first token, latency
    add_accuracy(c, n)  labelled tokens predicted right
and the meter samples the executor's normalized stats at most every `sample_every_s` (a round trip on a
pool): cache counters and per-worker work over time; expert heat is counted where the routing happens
(routing/heat.py) and read here. report.py and generation.py turn it into report.json's sections. The
numbers both the reports and the page use (percentiles, cache and worker sections, load imbalance, the
MoE kinds' summary rows) are here too, so report.py and page.py import this module and not each other.
Nothing here touches the model or the outputs.
"""
import os
import time
from contextlib import contextmanager

import numpy as np


class Meter:
    def __init__(self, moe=None, experts=None, heat=True, sample_every_s=0.25, kv_blocks=None, prefix=None):
        """moe: the executor view; experts: {layer: n experts} the heat rows are padded to (every layer of a
        MoE-kind job, zeros where none went); kv_blocks, prefix: the LLM's KV cache size and prefix index."""
        self.moe, self.experts, self.sample_every_s = moe, dict(experts or {}), sample_every_s
        self.heat_enabled = bool(heat) and moe is not None
        if self.heat_enabled:
            moe.count_heat()                   # counted where the executor routes, from now
        self.kv_blocks, self.prefix = kv_blocks, prefix
        self.prefix_first = prefix.stats() if prefix is not None else None
        self.first_stats = moe.stats() if moe is not None else None
        self.samples = []          # {"t", "tokens", "cache", "workers"}: hit rate and worker load over time
        self.latencies_ms = []     # per batch (MoE kinds)
        self.steps, self.buckets = [], {}      # per model step (t, prefill, decode, running, waiting, free blocks)
        self.ttft, self.latency = [], []       # per request
        self.tokens = self.labelled = self.correct = 0
        self.prefill = self.decode = self.preemptions = 0
        self.step_s, self.min_free_blocks = 0.0, None
        self.t0, self.t_end, self.final_stats = time.perf_counter(), None, None

    @contextmanager
    def batch(self, tokens):
        start = time.perf_counter()
        yield
        self.latencies_ms.append((time.perf_counter() - start) * 1e3)
        self.tokens += tokens
        self._maybe_sample()

    def on_step(self, s):
        self.step_s += s.t_end - s.t_start
        self.prefill += s.prefill_tokens
        self.decode += s.decode_tokens
        self.tokens += s.prefill_tokens + s.decode_tokens
        self.preemptions += s.preemptions
        self.steps.append((s.t_end - self.t0, s.prefill_tokens, s.decode_tokens, s.running, s.waiting,
                           s.free_blocks))
        sec = int(s.t_end - self.t0)
        b = self.buckets.setdefault(sec, {"t": sec, "prefill_tokens": 0, "decode_tokens": 0, "max_running": 0,
                                          "max_waiting": 0, "min_free_blocks": s.free_blocks, "finished": 0})
        b["prefill_tokens"] += s.prefill_tokens
        b["decode_tokens"] += s.decode_tokens
        b["max_running"] = max(b["max_running"], s.running)
        b["max_waiting"] = max(b["max_waiting"], s.waiting)
        b["min_free_blocks"] = min(b["min_free_blocks"], s.free_blocks)
        b["finished"] += s.finished
        self.min_free_blocks = s.free_blocks if self.min_free_blocks is None else min(self.min_free_blocks,
                                                                                      s.free_blocks)
        self._maybe_sample()

    def add_results(self, results):
        for r in results:
            m = getattr(r, "metrics", None)
            if m is None or r.error is not None:
                continue
            if m.time_to_first_token is not None:
                self.ttft.append(m.time_to_first_token)
            self.latency.append(m.latency)

    def add_accuracy(self, correct, labelled):
        self.correct += int(correct)
        self.labelled += int(labelled)

    def _maybe_sample(self):
        if self.moe is not None and (not self.samples or
                                     time.perf_counter() - self.t0 - self.samples[-1]["t"] >= self.sample_every_s):
            self.sample()

    def sample(self):
        stats = self.moe.stats()
        self.samples.append({"t": time.perf_counter() - self.t0, "tokens": self.tokens,
                             "cache": stats["cache"], "workers": stats["workers"]})
        return stats

    def finish(self):
        """The run is over: its end time and a last stats sample (the executor's final stats, or None)."""
        self.t_end = time.perf_counter()
        self.final_stats = self.sample() if self.moe is not None else None
        return self.final_stats

    @property
    def elapsed_s(self):
        return (self.t_end or time.perf_counter()) - self.t0

    def heat_report(self):
        """{"layer": [tokens routed to each expert]} counted where the executor routes (None when off); the
        rows of `experts` padded to its expert count (longer where experts were hot-added)."""
        if not self.heat_enabled:
            return None
        seen = {int(k): v for k, v in (self.moe.heat_report() or {}).items()}
        out = {}
        for layer in sorted(self.experts or seen):
            counts = seen.get(layer, [])
            row = np.zeros(max(self.experts.get(layer, 0), len(counts)), dtype=np.int64)
            row[:len(counts)] = counts
            out[str(layer)] = row.tolist()
        return out

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


def percentiles(values, count="n"):
    """{p50, p90, p99, mean, <count>: how many values} (None for each when there are none)."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None, count: 0}
    arr = np.asarray(values, dtype=np.float64)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(arr.mean()), count: len(values)}


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


def summary_table(title, rows, out_dir, html=True, pad=28):
    """The summary the terminal gets: `title`, one aligned row per (key, value), the report paths."""
    width = max(len(k) for k, _ in rows)
    rule = "-" * (width + pad)
    lines = ["", title, rule] + [f"{k.ljust(width)}  {v}" for k, v in rows] + [rule]
    lines.append(f"report: {os.path.join(out_dir, 'report.json')}")
    if html:
        lines.append(f"        {os.path.join(out_dir, 'report.html')}")
    return "\n".join(lines)
