"""What a generate/score job measured this run, for report.json: latencies, throughput, a timeline.

Role in the data flow: the generation job kinds hand every scheduler step (StepStats, when the LLM's
generate/score accept `on_step`) and every finished result (its RequestMetrics) to one
GenerationMeter; `report()` turns them into
    latency:    time_to_first_token_s and request_latency_s {p50, p90, p99, mean, n}
    throughput: prefill and decode tokens/s over the time spent in steps
    timeline:   per second of the run {t, prefill_tokens, decode_tokens, max_running, max_waiting,
                min_free_blocks, finished}
    preemptions
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
    def __init__(self):
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
        return {"latency": {"time_to_first_token_s": percentiles(self.ttft),
                            "request_latency_s": percentiles(self.latency)},
                "throughput": {"prefill_tokens_per_s": rate(self.prefill), "decode_tokens_per_s": rate(self.decode),
                               "prefill_tokens": self.prefill, "decode_tokens": self.decode, "step_s": self.step_s},
                "timeline": [self.buckets[k] for k in sorted(self.buckets)],
                "preemptions": self.preemptions}
