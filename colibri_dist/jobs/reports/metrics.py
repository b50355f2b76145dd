"""What a job measures while it runs: batch latencies, expert heat, time series of executor stats.

Role in the data flow: the job kinds wrap each batch in `meter.batch(tokens)`;
the meter times it, samples the executor's normalized stats after it (cache
counters, per-worker work) and keeps everything report.py needs to build
report.json and the plots. Nothing here touches the model or the outputs.
"""
import time
from contextlib import contextmanager

import numpy as np


class Meter:
    def __init__(self, executor, n_experts_by_layer, heat=True, sample_every_s=0.25):
        self.executor = executor
        self.sample_every_s = sample_every_s   # executor stats cost a round trip on a pool: not every batch
        self.heat_enabled = heat
        self.heat = {layer: np.zeros(n, dtype=np.int64) for layer, n in n_experts_by_layer.items()}
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

    def moe_forward(self, layer, x):
        """The executor's MoE forward, counting tokens per routed expert for the heat map."""
        if self.heat_enabled and len(x):
            idx, _ = self.executor.route(layer, x)
            counts = np.bincount(np.asarray(idx).ravel(), minlength=len(self.heat[layer]))
            if len(counts) > len(self.heat[layer]):      # experts hot-added while running
                grown = np.zeros(len(counts), dtype=np.int64)
                grown[:len(self.heat[layer])] = self.heat[layer]
                self.heat[layer] = grown
            self.heat[layer] += counts
        return self.executor.moe_forward(layer, x)

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
