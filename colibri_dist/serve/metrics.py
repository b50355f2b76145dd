"""Server metrics and their Prometheus text rendering (GET /metrics).

Role in the data flow: the backend's engine thread records every request's arrival, first token,
tokens and end here (under one lock); /metrics renders them with the gauges read from the model
(KV blocks, expert cache, prefix cache, pool workers). Names follow vLLM's where one exists,
prefixed colibri_. Exposition format 0.0.4 (text/plain).
"""
import threading
import time
from collections import deque

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0)
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0,
                   120.0)
RATE_WINDOW_S = 10.0


class Histogram:
    def __init__(self, buckets):
        self.buckets, self.counts, self.total, self.n = tuple(buckets), [0] * len(buckets), 0.0, 0

    def observe(self, v):
        self.n += 1
        self.total += v
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1

    def lines(self, name):
        out = [f'{name}_bucket{{le="{b}"}} {c}' for b, c in zip(self.buckets, self.counts)]
        return out + [f'{name}_bucket{{le="+Inf"}} {self.n}', f"{name}_sum {self.total!r}", f"{name}_count {self.n}"]


class Metrics:
    def __init__(self):
        self.lock = threading.Lock()
        self.ttft, self.latency = Histogram(TTFT_BUCKETS), Histogram(LATENCY_BUCKETS)
        self.requests = {"finished": 0, "aborted": 0, "rejected": 0, "error": 0}
        self.prompt_tokens = self.generation_tokens = 0
        self._recent = deque()              # (time, tokens) of the last RATE_WINDOW_S seconds
        self.t0 = time.perf_counter()

    def tokens(self, n, now=None):
        now = time.perf_counter() if now is None else now
        with self.lock:
            self.generation_tokens += n
            self._recent.append((now, n))

    def first_token(self, seconds):
        with self.lock:
            self.ttft.observe(seconds)

    def finished(self, status, latency=None, prompt_tokens=0):
        with self.lock:
            self.requests[status] = self.requests.get(status, 0) + 1
            self.prompt_tokens += prompt_tokens
            if latency is not None:
                self.latency.observe(latency)

    def tokens_per_second(self, now=None):
        now = time.perf_counter() if now is None else now
        with self.lock:
            while self._recent and self._recent[0][0] < now - RATE_WINDOW_S:
                self._recent.popleft()
            span = min(RATE_WINDOW_S, max(now - self.t0, 1e-9))
            return sum(n for _, n in self._recent) / span

    def render(self, gauges):
        """Prometheus text: the counters and histograms here plus `gauges` {name: (help, value | {labels: v})}."""
        rate = self.tokens_per_second()
        with self.lock:
            lines = []
            _metric(lines, "colibri_requests_total", "counter", "requests by how they ended",
                    {f'status="{k}"': v for k, v in self.requests.items()})
            _metric(lines, "colibri_prompt_tokens_total", "counter", "prompt tokens of ended requests",
                    self.prompt_tokens)
            _metric(lines, "colibri_generation_tokens_total", "counter", "generated tokens", self.generation_tokens)
            _metric(lines, "colibri_generation_tokens_per_second", "gauge",
                    f"generated tokens per second over the last {RATE_WINDOW_S:.0f} s", rate)
            for name, hist, text in (("colibri_time_to_first_token_seconds", self.ttft, "time to first token"),
                                     ("colibri_e2e_request_latency_seconds", self.latency, "request latency")):
                lines += [f"# HELP {name} {text}", f"# TYPE {name} histogram"] + hist.lines(name)
        for name, (text, value) in gauges.items():
            if value is not None:
                _metric(lines, name, "gauge", text, value)
        return "\n".join(lines) + "\n"


def _metric(lines, name, kind, text, value):
    lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
    if isinstance(value, dict):
        lines += [f"{name}{{{labels}}} {_num(v)}" for labels, v in value.items()]
    else:
        lines.append(f"{name} {_num(value)}")


def _num(v):
    return repr(float(v)) if isinstance(v, float) else str(int(v))


def model_gauges(stats, running, waiting, pool_stats=None):
    """Gauges from LLM.stats() (KV cache, expert cache, prefix cache) and the pool's per-worker load."""
    kv = stats.get("kv_cache", {}) if stats else {}
    g = {"colibri_requests_running": ("requests holding a KV cache (decoding or prefilling)", running),
         "colibri_requests_waiting": ("requests queued, not yet scheduled", waiting),
         "colibri_kv_cache_blocks_used": ("KV blocks in use by requests", kv.get("used_blocks")),
         "colibri_kv_cache_blocks_total": ("KV blocks in the cache", kv.get("blocks"))}
    if kv.get("blocks"):
        g["colibri_kv_cache_usage_ratio"] = ("fraction of KV blocks in use", kv.get("used_blocks", 0) / kv["blocks"])
    gets = (stats or {}).get("gets") or 0
    if gets:
        g["colibri_expert_cache_hit_rate"] = ("expert store RAM-cache hit rate since start", stats["hits"] / gets)
    prefix = _prefix_hit_rate(stats or {})
    if prefix is not None:
        g["colibri_prefix_cache_hit_rate"] = ("prompt tokens served from the prefix cache", prefix)
    if pool_stats:
        workers = pool_stats.get("workers") or []
        g["colibri_pool_worker_tokens"] = ("tokens each expert worker has run",
                                           {f'worker="{w.get("index", i)}"': w.get("tokens", 0) or 0
                                            for i, w in enumerate(workers)})
        hits = sum((w.get("cache") or {}).get("hits", 0) for w in workers)
        total = sum((w.get("cache") or {}).get("gets", 0) for w in workers)
        if total:
            g["colibri_expert_cache_hit_rate"] = ("expert cache hit rate over the pool's workers", hits / total)
    g.update(runner_gauges((stats or {}).get("runners")))
    return g


RUNNER_GAUGES = (   # (name, help, key of a runner's entry in RunnerSet.stats: pool/serving.py)
    ("colibri_runner_requests_running", "requests in flight on each sequence runner", "requests_in_flight"),
    ("colibri_runner_requests_routed", "requests the server has given each sequence runner", "requests_routed"),
    ("colibri_runner_generation_tokens", "tokens each sequence runner has generated for the server",
     "generation_tokens"),
    ("colibri_runner_kv_cache_blocks_used", "KV blocks in use on each sequence runner", ("kv_cache", "used_blocks")),
    ("colibri_runner_alive", "1 while a sequence runner answers, 0 once it is lost", "alive"),
)


def runner_gauges(runners):
    """Per-runner gauges (label runner="i") of `colibri serve --runners M`; {} without runners."""
    if not runners:
        return {}
    g = {}
    for name, text, key in RUNNER_GAUGES:
        values = {}
        for r in runners:
            v = r.get(key[0], {}).get(key[1]) if isinstance(key, tuple) else r.get(key)
            if v is not None:
                values[f'runner="{r["index"]}"'] = int(v)
        g[name] = (text, values)
    return g


def _prefix_hit_rate(stats):
    for key in ("prefix_cache", "prefix_caching"):
        p = stats.get(key) or (stats.get("kv_cache") or {}).get(key)
        if isinstance(p, dict):
            if p.get("hit_rate") is not None:
                return float(p["hit_rate"])
            q, h = p.get("queries") or p.get("lookups"), p.get("hits")
            if q:
                return h / q
    return None
