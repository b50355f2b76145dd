"""RunnerBackend: the server's requests spread over M persistent engines (the pool's sequence runners).

Role in the data flow: `colibri serve MODEL --workers N --runners M` (or --pool NAME --runners M). The
HTTP side is EngineBackend's (submit -> a RequestStream, abort, exclusive, load); instead of stepping
one engine in this process, the driver thread hands each admitted request to the least loaded live
runner (fewest requests in flight; ties: the one given fewest so far), where it stays until it ends,
and polls the runners (pool/serving.py RunnerSet) for their requests' latest cumulative outputs,
which go to the requests' queues as the in-process engine's do. An abort (the client went away) is
sent to that request's runner, whose engine frees its KV blocks at once. A runner that dies fails
its requests (503); the others keep serving.

Bits: every runner is an LLM over the same file with the server's seed and scheduler limits, and a
request samples with its own RNG (base seed + request id), so its tokens and logprobs equal
LLM.generate's whichever runner it lands on and whatever runs beside it (tests/serve/test_serve_ray.py).
"""
import logging
import time

from .backend import EngineBackend, requests_fitting
from .errors import APIError

log = logging.getLogger("colibri.serve")
POLL_TIMEOUT_S = 0.01      # the driver's wait for runner outputs before it looks at its inbox again


class RunnerBackend(EngineBackend):
    deltas = False           # a runner's poll hands the latest cumulative output of each request (one per poll)

    def __init__(self, runner_set, metrics, max_num_seqs, max_waiting, overload_status=429):
        super().__init__(None, metrics, max_num_seqs, max_waiting, overload_status)
        self.runner_set = runner_set
        n = runner_set.n
        self.capacity = n * max_num_seqs
        self._owner = {}                          # request id -> runner index
        self.in_flight, self.routed, self.tokens_by = [0] * n, [0] * n, [0] * n
        self._thread.name = "colibri-runners"

    # ------------------------------------------------------------ HTTP side
    def load(self):
        """(running, waiting) requests: on each runner, those whose samples fit its max_num_seqs (backend.py)."""
        by_runner = {}
        for rid, stream in list(self._active.items()):
            by_runner.setdefault(self._owner.get(rid), []).append(stream.n)
        running = sum(requests_fitting(ns, self.max_num_seqs) for ns in by_runner.values())
        return running, len(self._active) + len(self._inbox) - running

    def model_stats(self):
        """(LLM.stats()-shaped sums over the runners + "runners": per-runner figures, the pool's stats)."""
        runners = self.runner_set.runner_stats()
        for r in runners:
            i = r["index"]
            r.update(requests_in_flight=self.in_flight[i], requests_routed=self.routed[i],
                     generation_tokens=self.tokens_by[i])
        alive = [r for r in runners if r.get("alive")]
        kv = {k: sum(r["kv_cache"][k] for r in alive) for k in ("blocks", "used_blocks")}
        q = sum((r["prefix_cache"] or {}).get("queried_tokens") or 0 for r in alive)
        h = sum((r["prefix_cache"] or {}).get("hit_tokens") or 0 for r in alive)
        stats = {"kv_cache": kv, "runners": runners,
                 "prefix_cache": {"queried_tokens": q, "hit_tokens": h, "hit_rate": h / q if q else None}}
        try:
            pool = self.runner_set.pool_stats()
        except Exception as exc:                  # a pool hiccup must not break /metrics
            log.warning("pool stats failed: %s", exc)
            pool = None
        return stats, pool

    # ------------------------------------------------------------ driver thread
    def _pick(self):
        live = self.runner_set.live()
        if not live:
            return None
        return min(live, key=lambda i: (self.in_flight[i], self.routed[i], i))

    def _take_inbox(self):
        shares = {}
        while self._inbox and not self._control:
            stream, prompt, params = self._inbox.popleft()
            i = self._pick()
            if i is None:
                self._deliver(stream, APIError(503, "no sequence runner is alive", code="engine_stopped"))
                self.metrics.finished("error")
                continue
            shares.setdefault(i, []).append({"rid": stream.request_id, "kind": "generate", "prompt": prompt,
                                             "params": params, "stream": True})
            self._active[stream.request_id], self._owner[stream.request_id] = stream, i
            self.in_flight[i] += 1
            self.routed[i] += 1
        for i, items in shares.items():
            self.runner_set.submit(i, items)

    def _abort_running(self, rid):
        """The request's own runner aborts it (its engine frees the KV blocks)."""
        i = self._owner.pop(rid)
        self.in_flight[i] -= 1
        self.runner_set.abort(i, [rid])

    def _step(self):
        try:
            got = self.runner_set.poll(POLL_TIMEOUT_S)
        except Exception as exc:
            log.exception("polling the runners failed")
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._fail_all(APIError(500, f"the runners failed: {self.last_error}", code="engine_error"))
            return
        now, batch = time.perf_counter(), []
        for i, out in got:
            if out is None or out.get("errors"):
                why = "died" if out is None else f"failed: {out['errors'][0]}"
                self.last_error = f"runner {i} {why}"
                self._fail_runner(i, APIError(503, f"sequence runner {i} {why}", code="engine_error"))
                continue
            self.steps += 1
            for rid, o in {**out.get("results", {}), **out.get("outputs", {})}.items():
                self._take_output(i, rid, o, now, batch)
        self._deliver_many(batch)

    def _take_output(self, i, rid, o, now, batch):
        stream = self._active.get(rid)
        if stream is None or self._owner.get(rid) != i:
            return                                 # aborted meanwhile
        before = stream.tokens
        if getattr(o, "error", None) is None:
            self._account(stream, o, now)
        else:
            self.metrics.finished("error")
        self.tokens_by[i] += stream.tokens - before
        batch.append((stream, o))
        if o.finished:
            del self._active[rid]
            del self._owner[rid]
            self.in_flight[i] -= 1

    def _fail_runner(self, i, exc):
        for rid in [r for r, k in self._owner.items() if k == i]:
            self.runner_set.abort(i, [rid])
            self._deliver(self._active.pop(rid), exc)
            del self._owner[rid]
            self.metrics.finished("error")
        self.in_flight[i] = 0

    def _fail_all(self, exc):
        for i in range(self.runner_set.n):
            self._fail_runner(i, exc)
        while self._inbox:
            self._deliver(self._inbox.popleft()[0], exc)
