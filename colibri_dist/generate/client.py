"""The engine client: one submit / abort / poll protocol over a generation engine, wherever it runs.

Role in the data flow: the server's driver thread (serve/backend.py) and LLM.generate/chat/score (api.py
`_drive`) drive an engine only through these calls, and RunnerPool.generate/score drive the Ray runners
through the same ones:
    submit(request_id, prompt, params, output_kind=DELTA, **options)   queue a request (a bad one raises
                                                                      InvalidArgument; options: kind, seed_key, ...)
    abort(request_id)                      stop it where it runs (its KV blocks are freed); no output follows
    poll(timeout) -> [RequestOutput]       what progressed, as each request asked: DELTA (only what is new)
                                           or FINAL_ONLY (its finished output; a Score for a runner's score)
    running(sample_counts, max_num_seqs)   how many of these requests ((request id, samples), oldest first)
                                           run at once; `engines`: how many batches of max_num_seqs there are
    stats() -> (model stats, pool stats)   read between two steps; `lock` is held around every engine call
    alive, close()
Two implementations: InProcessClient here (an LLMEngine, or the server's RemoteEngine child: each poll is one
engine step) and pool/runner_client.py RunnerClient (M Ray sequence runners: least-loaded routing, the runners'
own deltas, a dead runner's final-only requests resumed elsewhere). A request lost with the engine that ran
it (a dead runner) comes back finished with error=EngineLost.
"""
import logging
import threading

from ..errors import ColibriError
from .params import RequestOutputKind

log = logging.getLogger("colibri.generate")
DELTA, FINAL_ONLY = RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY


class EngineLost(ColibriError):
    """The engine a request ran on is gone (a sequence runner died or failed); other requests go on."""


class InProcessClient:
    engines = 1

    def __init__(self, engine, stats_fn=None, pool_stats_fn=None, on_token=None, on_step=None):
        """engine: an LLMEngine or anything with add_request / abort / step (serve's RemoteEngine);
        on_token / on_step: the engine step's callbacks (LLM.generate's)."""
        self.engine, self.stats_fn, self.pool_stats_fn = engine, stats_fn, pool_stats_fn
        self.on_token, self.on_step = on_token, on_step
        self.lock = threading.Lock()
        self.open = set()                        # submitted, not yet finished nor aborted

    def submit(self, request_id, prompt, params=None, output_kind=DELTA, **options):
        with self.lock:
            self.engine.add_request(request_id, prompt, params, output_kind=output_kind, **options)
        self.open.add(request_id)

    def abort(self, request_id):
        self.open.discard(request_id)
        with self.lock:
            return self.engine.abort(request_id)

    def poll(self, timeout=None):
        """One engine step (timeout is not used: the step is the wait); [] with nothing open."""
        if not self.open:
            return []
        args = () if self.on_token is None and self.on_step is None else (self.on_token, self.on_step)
        with self.lock:
            outs = self.engine.step(*args)
            if not outs and not getattr(self.engine, "has_unfinished", _true)():
                raise ColibriError(f"the engine finished without requests {sorted(map(str, self.open))[:5]}")
        for out in outs:
            if out.finished:
                self.open.discard(out.request_id)
        return outs

    def running(self, sample_counts, max_num_seqs):
        return requests_fitting([n for _, n in sample_counts], max_num_seqs)

    def stats(self):
        stats = pool = None
        with self.lock:
            if self.stats_fn is not None:
                stats = self.stats_fn()
        if self.pool_stats_fn is not None:
            try:
                pool = self.pool_stats_fn()
            except Exception as exc:          # a pool hiccup must not break /metrics
                log.warning("pool stats failed: %s", exc)
        return stats, pool

    @property
    def alive(self):
        return getattr(self.engine, "alive", True)

    def close(self):
        """Abort what is still open (the engine itself belongs to whoever made it)."""
        for rid in list(self.open):
            try:
                self.abort(rid)
            except Exception:
                pass


def _true():
    return True


def requests_fitting(sample_counts, max_num_seqs):
    """How many of these requests (their sample counts, oldest first) the scheduler's FIFO admission runs at
    once: each takes n of the max_num_seqs sequences; the first always runs."""
    used = count = 0
    for n in sample_counts:
        if count and used + n > max_num_seqs:
            break
        used, count = used + n, count + 1
    return count
