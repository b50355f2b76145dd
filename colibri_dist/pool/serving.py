"""RunnerSet: the HTTP server's engine client over M sequence runners on a shared expert pool (`colibri serve
--workers N --runners M`).

Role in the data flow: serve/backend.py's driver thread drives it as it drives the in-process engine: it is
a RunnerClient (runner_client.py: submit to the least loaded runner, abort, poll the runners' deltas, a dead
runner's requests answered EngineLost) over the runners of a RunnerPool (runners.py) it starts on a Pool
started here (workers=N) or the one passed in (an attached pool service, a Ray Serve replica's shared pool),
plus what /metrics shows: per-runner figures and the pool's stats. Ray stays in this room: the backend sees
plain objects.
"""
import logging

import ray

from .facade import _unwrap
from .runner_client import RunnerClient
from .runners import RunnerPool

log = logging.getLogger("colibri.serve")


class RunnerSet(RunnerClient):
    def __init__(self, path, runners, pool=None, llm=None, lanes=2, **pool_options):
        self.rp = RunnerPool(path, runners=runners, pool=pool, llm=llm, lanes=lanes, runner_resources=None,
                             **pool_options)
        self.pool = self.rp.pool
        super().__init__(self.rp.runners)

    def stats(self):
        """(LLM.stats()-shaped sums over the runners + "runners": per-runner figures, the pool's stats)."""
        stats, _ = super().stats()
        try:
            pool = self.pool_stats()
        except Exception as exc:                  # a pool hiccup must not break /metrics
            log.warning("pool stats failed: %s", exc)
            pool = None
        return stats, pool

    def pool_stats(self, timeout=30.0):
        """The pool's stats() with every live runner's routing counters (per-worker tokens, ...)."""
        refs = [self.runners[i].counters.remote() for i in self.live()]
        counters = [ray.get(r, timeout=timeout) for r in refs]
        return _unwrap(self.pool._router.stats.remote(counters, "runners"))

    def shutdown(self):
        self.rp.shutdown()

    def close(self):
        super().close()
        self.shutdown()
