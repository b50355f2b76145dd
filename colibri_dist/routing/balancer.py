"""Replica choice for the pool: which worker runs an expert's rows in one layer batch.

Role in the data flow: after exact routing has grouped a layer batch per expert,
the Router asks a balancer, expert by expert, which worker replica gets that
expert's rows. Balancers only decide *where* an expert runs, never which experts
a token uses, so outputs are unchanged whatever they pick.

Strategies (pool.balancer.kind):
  token-bucket  for each replica (worker) of an expert, a ring buffer of the gate-score
                mass of the last `window` assignments of that expert to that worker;
                a layer batch (assign) goes heaviest unit first to the replica with the
                smallest ring among those whose recent rows (decayed by half per batch)
                + this unit stay under the cap; cap = c x mean with
                c = threshold*n/(n-1+threshold) over n live workers, i.e. `threshold`
                bounds the most over the least loaded worker, so the bound tightens as
                the pool shrinks (2 workers at 1.3: 1.13x the mean). A unit no replica
                can take spills to the worker that expert spilled to last (it stays warm
                there), else the least loaded worker (every worker can serve every
                expert). Per-expert rings spread each expert's traffic
                evenly over its copies, which is what the EPLB placement assumes
                (each copy carries load / copies).
  round-robin   cycle through an expert's replicas.
  home          always the expert's home worker (first replica).
"""
from collections import defaultdict

from ..errors import InvalidArgument

KINDS = ("token-bucket", "round-robin", "home")


class _Ring:
    """Fixed-size ring buffer of floats with a running sum."""

    def __init__(self, size):
        self.values = [0.0] * size
        self.pos = 0
        self.total = 0.0

    def push(self, value):
        self.total += value - self.values[self.pos]
        self.values[self.pos] = value
        self.pos = (self.pos + 1) % len(self.values)
        if self.pos == 0:  # re-sum once per lap so float drift cannot accumulate
            self.total = sum(self.values)


class _BaseBalancer:
    """Common bookkeeping: live workers and per-worker assigned mass/rows."""

    kind = None

    def __init__(self, n_workers):
        if int(n_workers) < 1:
            raise InvalidArgument(f"balancer needs at least one worker, got {n_workers}")
        self.n_workers = int(n_workers)
        self.dead = set()
        self.assigned_mass = [0.0] * self.n_workers
        self.assigned_rows = [0] * self.n_workers

    def live(self):
        return [w for w in range(self.n_workers) if w not in self.dead]

    def mark_dead(self, worker):
        self.dead.add(int(worker))

    def mark_alive(self, worker):
        self.dead.discard(int(worker))

    def _live_replicas(self, replicas):
        if not replicas:
            raise InvalidArgument("an expert needs at least one replica")
        alive = [w for w in replicas if w not in self.dead]
        if alive:
            return alive
        live = self.live()
        if not live:
            raise InvalidArgument("no live worker left to run an expert")
        return live  # every replica is down: any live worker can serve the expert

    def choose(self, expert, replicas, mass, rows=1):
        """Pick a worker among `replicas` for `expert` carrying `mass` gate score over `rows` rows."""
        worker = self._pick(expert, self._live_replicas(replicas), float(mass))
        self.record(expert, worker, float(mass), int(rows))
        return worker

    def record(self, expert, worker, mass, rows=1):
        self.assigned_mass[worker] += mass
        self.assigned_rows[worker] += rows

    def assign(self, loads, replicas_of, expert_of=lambda key: key, among=None):
        """Assign a whole layer batch: loads = {key: (mass, rows)}; returns {key: worker}
        (`among`: only these workers, when given).

        Heavier units are placed first (ties by key) so the greedy sees the big
        items while there is still room to spread them. expert_of(key) names the
        expert of a unit (several units may be chunks of one expert).
        """
        order = sorted(loads, key=lambda k: (-loads[k][0], k))
        pick = (lambda k: replicas_of(k)) if not among else \
            (lambda k: [w for w in replicas_of(k) if w in among] or list(among))
        return {k: self.choose(expert_of(k), pick(k), loads[k][0], loads[k][1]) for k in order}

    def state(self):
        return {"kind": self.kind, "dead": sorted(self.dead),
                "assigned_mass": list(self.assigned_mass), "assigned_rows": list(self.assigned_rows)}


class TokenBucketBalancer(_BaseBalancer):
    """Per (expert, replica) rings of recent gate mass; smallest ring wins, hot workers are skipped."""

    kind = "token-bucket"

    def __init__(self, n_workers, window=64, threshold=1.3, decay=0.5):
        super().__init__(n_workers)
        if int(window) < 1:
            raise InvalidArgument(f"balancer window must be >= 1, got {window}")
        if not float(threshold) > 0:
            raise InvalidArgument(f"balancer threshold must be > 0, got {threshold}")
        self.window = int(window)
        self.threshold = float(threshold)
        self.rings = {}                           # (expert, worker) -> _Ring
        self.loads = [0.0] * self.n_workers       # sum of each worker's rings
        self.recent = [0.0] * self.n_workers      # rows of recent batches, halved at each batch
        self.decay = float(decay)
        self.spill = {}                           # expert -> worker its over-cap rows went to last
        self.fallbacks = 0

    def bucket(self, expert, worker):
        ring = self.rings.get((expert, worker))
        return ring.total if ring else 0.0

    def load(self, worker):
        return self.loads[worker]

    def mean_load(self):
        live = self.live()
        return sum(self.loads[w] for w in live) / len(live) if live else 0.0

    def cap(self):
        """Ring load a worker may carry and still take more in a single choose():
        cap_factor(live workers) x the mean (the bound tightens as the pool shrinks)."""
        return self.cap_factor(len(self.live())) * self.mean_load()

    def _pick(self, expert, candidates, mass):
        cap = self.cap()
        under = [w for w in candidates if self.loads[w] <= cap]
        if under:
            return min(under, key=lambda w: (self.bucket(expert, w), candidates.index(w)))
        self.fallbacks += 1
        return min(self.live(), key=lambda w: (self.loads[w], w))

    def assign(self, loads, replicas_of, expert_of=lambda key: key, among=None):
        """A whole layer batch (on the live workers, or only on `among`), bounded: each worker may carry at most cap(n) x the mean of
        (recent rows + this batch's rows); units go heaviest first (rows) to the replica with the
        smallest ring that still fits (home first on ties: cache locality), else to the worker the
        expert spilled to last (so a spilled expert stays warm in one more cache), else to the
        least loaded worker with room, else the least loaded. Decides placement only."""
        live = [w for w in among if w not in self.dead] if among else self.live()
        if not live:
            raise InvalidArgument("no live worker left to run an expert")
        self.recent = [r * self.decay for r in self.recent]
        total = sum(int(rows) for _, rows in loads.values())
        cap = self.cap_factor(len(live)) * (sum(self.recent[w] for w in live) + total) / len(live)
        out = {}
        for k in sorted(loads, key=lambda k: (-loads[k][1], -loads[k][0], k)):
            mass, rows = float(loads[k][0]), int(loads[k][1])
            e = expert_of(k)
            cands = [w for w in self._live_replicas(replicas_of(k)) if w in live] or live
            fits = [w for w in cands if self.recent[w] + rows <= cap]
            if fits:
                w = min(fits, key=lambda w: (self.bucket(e, w), cands.index(w)))
            else:
                room = [w for w in live if self.recent[w] + rows <= cap]
                last = self.spill.get(e)
                w = last if last in room else min(room or live, key=lambda w: (self.recent[w], w))
                self.spill[e] = w
                self.fallbacks += 1
            self.recent[w] += rows
            self.record(e, w, mass, rows)
            out[k] = w
        return out

    def cap_factor(self, n):
        """threshold bounds max/min: a worker at c x mean leaves the others (n-c)/(n-1) x mean, so
        c = threshold*n/(n-1+threshold) (2 workers at 1.3: 1.13; 8: 1.25; -> 1.3)."""
        return self.threshold * n / (n - 1 + self.threshold) if n else 0.0

    def record(self, expert, worker, mass, rows=1):
        super().record(expert, worker, mass, rows)
        ring = self.rings.get((expert, worker))
        if ring is None:
            ring = self.rings[(expert, worker)] = _Ring(self.window)
        before = ring.total
        ring.push(mass)
        self.loads[worker] += ring.total - before

    def state(self):
        out = super().state()
        out.update(window=self.window, threshold=self.threshold, fallbacks=self.fallbacks,
                   worker_loads=list(self.loads), recent_rows=list(self.recent),
                   cap_factor=self.cap_factor(len(self.live())))
        return out


class RoundRobinBalancer(_BaseBalancer):
    """Cycle through each expert's live replicas."""

    kind = "round-robin"

    def __init__(self, n_workers, **_ignored):
        super().__init__(n_workers)
        self.next = defaultdict(int)

    def _pick(self, key, candidates, mass):
        i = self.next[key] % len(candidates)
        self.next[key] += 1
        return candidates[i]


class HomeBalancer(_BaseBalancer):
    """Always the home worker (first live replica)."""

    kind = "home"

    def __init__(self, n_workers, **_ignored):
        super().__init__(n_workers)

    def _pick(self, key, candidates, mass):
        return candidates[0]


def make_balancer(spec, n_workers):
    """Build a balancer from a kind string or a {kind, window, threshold} mapping."""
    if spec is None:
        spec = "token-bucket"
    if isinstance(spec, str):
        spec = {"kind": spec}
    spec = dict(spec)
    kind = spec.pop("kind", "token-bucket")
    unknown = set(spec) - {"window", "threshold"}
    if unknown:
        raise InvalidArgument(f"pool.balancer: unknown key(s) {sorted(unknown)}; expected kind, window, threshold")
    if kind == "token-bucket":
        return TokenBucketBalancer(n_workers, **spec)
    if kind == "round-robin":
        return RoundRobinBalancer(n_workers)
    if kind == "home":
        return HomeBalancer(n_workers)
    raise InvalidArgument(f"pool.balancer.kind: unknown balancer {kind!r}; expected one of {', '.join(KINDS)}")
