"""What a generate/score job measured this run, for report.json: latencies, throughput, a timeline.

Role in the data flow: the generation job kinds hand every scheduler step (StepStats, when the LLM's
generate/score accept `on_step`) and every finished result (its RequestMetrics) to one
GenerationMeter; `report()` turns them into
    latency:    time_to_first_token_s and request_latency_s {p50, p90, p99, mean, n}
    throughput: prefill and decode tokens/s over the time spent in steps
    timeline:   per second of the run {t, prefill_tokens, decode_tokens, max_running, max_waiting,
                min_free_blocks, finished}
    preemptions
and, given the executor view of where the LLM's MoE layers run (executors.view_of), samples of its
stats at most every 0.25 s of steps:
    cache:      {hits, misses, evictions, bytes_loaded, hit_rate} over this run
    workers:    per worker {id, tokens, experts, cpus, node}; load_imbalance (max / mean tokens)
    samples:    [{t, cache, workers}] (hit rate and worker load over time, for report.html)
    expert_heat {layer: [tokens routed to each expert]} (counted where the routing happens; report.expert_heat);
    kv_cache {blocks, min_free_blocks}
"""
import time

import numpy as np


def percentiles(values):
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "n": 0}
    a = np.asarray(values, dtype=np.float64)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(a.mean()), "n": len(values)}


class GenerationMeter:
    def __init__(self, moe=None, kv_blocks=None, sample_every_s=0.25, prefix=None, heat=True):
        self.moe, self.kv_blocks, self.sample_every_s = moe, kv_blocks, sample_every_s
        self.heat_enabled = heat and moe is not None   # report.expert_heat: counted where moe routes, from now
        if self.heat_enabled:
            moe.count_heat()
        self.prefix = prefix                      # the KV cache's PrefixIndex (prefix caching) or None
        self.prefix_first = prefix.stats() if prefix is not None else None
        self.first_stats = moe.stats() if moe is not None else None
        self.samples, self.min_free_blocks = [], None
        self.steps = []          # per model step (t, prefill, decode, running, waiting, free_blocks): the plots
        self.t0 = time.perf_counter()
        self.buckets = {}
        self.step_s = 0.0
        self.prefill = self.decode = self.preemptions = 0
        self.ttft, self.latency = [], []

    def on_step(self, s):
        self.step_s += s.t_end - s.t_start
        self.prefill += s.prefill_tokens
        self.decode += s.decode_tokens
        self.preemptions += s.preemptions
        self.steps.append((s.t_end - self.t0, s.prefill_tokens, s.decode_tokens, s.running, s.waiting,
                           s.free_blocks))
        sec = int(s.t_end - self.t0)
        b = self.buckets.get(sec)
        if b is None:
            b = self.buckets[sec] = {"t": sec, "prefill_tokens": 0, "decode_tokens": 0, "max_running": 0,
                                     "max_waiting": 0, "min_free_blocks": s.free_blocks, "finished": 0}
        b["prefill_tokens"] += s.prefill_tokens
        b["decode_tokens"] += s.decode_tokens
        b["max_running"] = max(b["max_running"], s.running)
        b["max_waiting"] = max(b["max_waiting"], s.waiting)
        b["min_free_blocks"] = min(b["min_free_blocks"], s.free_blocks)
        b["finished"] += s.finished
        self.min_free_blocks = s.free_blocks if self.min_free_blocks is None else min(self.min_free_blocks,
                                                                                      s.free_blocks)
        if self.moe is not None and (not self.samples or
                                     time.perf_counter() - self.t0 - self.samples[-1]["t"] >= self.sample_every_s):
            self.sample()

    def sample(self):
        stats = self.moe.stats()
        self.samples.append({"t": time.perf_counter() - self.t0, "cache": stats["cache"],
                             "workers": stats["workers"]})

    def add_results(self, results):
        for r in results:
            m = getattr(r, "metrics", None)
            if m is None or r.error is not None:
                continue
            if m.time_to_first_token is not None:
                self.ttft.append(m.time_to_first_token)
            self.latency.append(m.latency)

    def report(self):
        rate = (lambda n: n / self.step_s if self.step_s > 0 else None)
        out = self._executor_report() if self.moe is not None else {}
        out["kv_cache"] = {"blocks": self.kv_blocks, "min_free_blocks": self.min_free_blocks,
                           "peak_used_blocks": None if self.kv_blocks is None or self.min_free_blocks is None
                           else self.kv_blocks - self.min_free_blocks}
        out["prefix_cache"] = self._prefix_report()
        return {**out, "latency": {"time_to_first_token_s": percentiles(self.ttft),
                            "request_latency_s": percentiles(self.latency)},
                "throughput": {"prefill_tokens_per_s": rate(self.prefill), "decode_tokens_per_s": rate(self.decode),
                               "prefill_tokens": self.prefill, "decode_tokens": self.decode, "step_s": self.step_s},
                "timeline": [self.buckets[k] for k in sorted(self.buckets)],
                "preemptions": self.preemptions}

    def _prefix_report(self):
        """This run's prompt tokens looked up in the prefix cache and found there (vLLM's hit rate)."""
        if self.prefix is None:
            return {"enabled": False}
        last, first = self.prefix.stats(), self.prefix_first
        q, h = last["queried_tokens"] - first["queried_tokens"], last["hit_tokens"] - first["hit_tokens"]
        return {"enabled": True, "queried_tokens": q, "hit_tokens": h, "hit_rate": h / q if q else None,
                "evictions": last["evictions"] - first["evictions"]}

    def _executor_report(self):
        from ..reports.metrics import cache_section, load_imbalance, worker_section
        self.sample()
        first, last = self.first_stats, self.samples[-1]
        workers = worker_section(first["workers"], last["workers"])
        heat = self.moe.heat_report() if self.heat_enabled else None
        return {"cache": cache_section(first["cache"], last["cache"]), "workers": workers,
                "load_imbalance": load_imbalance(workers), "expert_heat": heat,
                "samples": [{"t": s["t"], "cache": s["cache"], "workers": s["workers"]} for s in self.samples]}
