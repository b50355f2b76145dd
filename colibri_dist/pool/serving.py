"""RunnerSet: the HTTP server's handle on M sequence runners over a shared expert pool (`colibri serve
--workers N --runners M`).

Role in the data flow: serve/runner_backend.py's driver thread is the only caller. It `submit`s served
requests to the runner it picked (they run with cumulative outputs, runner.py "stream"), `abort`s
them when their client goes away, and `poll`s: one long-poll is kept in flight per live runner, and
poll(timeout) returns [(runner index, its poll answer)] for the answers that came (None for a runner
that died: its requests are failed by the backend, the runner gets no new ones). The runners are
RunnerPool's (runners.py), on a Pool started here (workers=N) or the one passed in (an attached pool
service, a Ray Serve replica's shared pool). Ray stays in this room: the backend sees plain objects.
"""
import ray

from .client import DEAD
from .facade import _unwrap
from .runners import RunnerPool

POLL_WAIT_S = 0.5        # how long a runner's poll waits for something to report


class RunnerSet:
    def __init__(self, path, runners, pool=None, llm=None, lanes=2, **pool_options):
        self.rp = RunnerPool(path, runners=runners, pool=pool, llm=llm, lanes=lanes, runner_resources=None,
                             **pool_options)
        self.pool = self.rp.pool
        self.n = len(self.rp.runners)
        self.dead = set()
        self._polls = {}                   # poll ref -> runner index (one in flight per live runner)
        self._errors = []                  # submit refs not yet checked

    def live(self):
        return [i for i in range(self.n) if i not in self.dead]

    def submit(self, i, items):
        self._errors.append((i, self.rp.runners[i].submit.remote(items)))

    def abort(self, i, rids):
        if i not in self.dead:
            self.rp.runners[i].abort.remote(list(rids))

    def poll(self, timeout):
        """[(i, {"outputs", "results", "errors", ...} or None if runner i died)] of the polls answered
        within timeout (s)."""
        for i in self.live():
            if i not in self._polls.values():
                self._polls[self.rp.runners[i].poll.remote(POLL_WAIT_S)] = i
        if not self._polls:
            return []
        ready, _ = ray.wait(list(self._polls), num_returns=1, timeout=timeout)
        if ready:
            rest = [r for r in self._polls if r not in ready]
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0] if rest else []
        got = [(self._polls.pop(ref), self._get(ref)) for ref in ready]
        for i, out in got:
            if out is None:
                self.dead.add(i)
        return got + self._submit_failures()

    def _get(self, ref):
        try:
            return ray.get(ref)
        except DEAD:
            return None

    def _submit_failures(self):
        """A submit that raised (not a bad request: those come back as failed outputs) kills nothing
        but its requests: reported as that runner's error."""
        done, keep = [], []
        for i, ref in self._errors:
            if ray.wait([ref], timeout=0)[0]:
                try:
                    ray.get(ref)
                except DEAD:
                    self.dead.add(i)
                    done.append((i, None))
                except Exception as exc:
                    done.append((i, {"errors": [f"{type(exc).__name__}: {exc}"]}))
            else:
                keep.append((i, ref))
        self._errors = keep
        return done

    def runner_stats(self, timeout=10.0):
        """[serve_stats of runner i, or {"index": i, "alive": False}] in runner order."""
        refs = {i: self.rp.runners[i].serve_stats.remote() for i in self.live()}
        out = []
        for i in range(self.n):
            try:
                out.append(dict(ray.get(refs[i], timeout=timeout), alive=True) if i in refs else
                           {"index": i, "alive": False})
            except Exception as exc:
                out.append({"index": i, "alive": False, "error": str(exc)[:200]})
        return out

    def pool_stats(self, timeout=30.0):
        """The pool's stats() with every live runner's routing counters (per-worker tokens, ...)."""
        refs = [self.rp.runners[i].counters.remote() for i in self.live()]
        counters = [ray.get(r, timeout=timeout) for r in refs]
        return _unwrap(self.pool._router.stats.remote(counters, "runners"))

    def shutdown(self):
        self.rp.shutdown()
