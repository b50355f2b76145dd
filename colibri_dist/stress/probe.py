"""What the harness learns from pool.stats(): worker pids, per-process store counters.

Role in the data flow: the RSS sampler and the fault injectors ask for worker
pids, the report for store counters. pool.stats() goes through the Router (one
call at a time, queued behind batches), so answers are cached for `max_age_s`.
Store counters are kept per worker *process*: a killed worker's last counters
still count in the totals after its restarted process starts again from zero.
"""
import threading
import time


class PoolProbe:
    def __init__(self, pool, max_age_s=1.0):
        self.pool = pool
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._at = 0.0
        self._stats = None
        self.last_cache = {}         # pid -> (worker name, last store stats)
        self.errors = 0

    def stats(self, fresh=False):
        with self._lock:
            if fresh or self._stats is None or time.monotonic() - self._at > self.max_age_s:
                try:
                    stats = self.pool.stats()
                except Exception:
                    self.errors += 1
                    if self._stats is None:
                        raise
                    return self._stats
                self._stats, self._at = stats, time.monotonic()
                self._remember(stats)
            return self._stats

    def _remember(self, stats):
        for w in stats.get("workers", []):
            cache = store_stats(w.get("cache"))
            if w.get("pid") and cache is not None and w.get("alive", True):
                self.last_cache[w["pid"]] = (worker_name(w), cache)

    def pids(self, fresh=False):
        """{worker name: pid} of workers the pool reports alive."""
        return {worker_name(w): w["pid"] for w in self.stats(fresh).get("workers", [])
                if w.get("alive", True) and w.get("pid")}

    def cache_stats_per_process(self):
        with self._lock:
            return {pid: dict(name=name, **cache) for pid, (name, cache) in self.last_cache.items()}


def worker_name(w):
    return f"worker-{w.get('index')}"


def store_stats(cache):
    """The ExpertStore counters inside a worker's engine stats (flat or under 'store')."""
    if not isinstance(cache, dict):
        return None
    if "ram" in cache or "gets" in cache:
        return cache
    inner = cache.get("store")
    return inner if isinstance(inner, dict) else None
