"""Which workers hold which experts: home placement plus replicas of hot experts.

Role in the data flow: the pool's Router keeps a Placement; for every expert a
layer batch routes to, `replicas_of((layer, e))` lists the workers that keep it
warm (home first) and the balancer picks one of them. Placement decides speed,
never results: every worker can compute every expert bit-identically.

Planning, per MoE layer (each layer batch runs on its own):
  1. replica counts, the DeepSeek EPLB greedy: start with one copy per expert,
     then `replicas` times give one more copy to the expert with the largest
     load-per-copy (at most one copy per worker);
  2. packing: copies sorted by load-per-copy, heaviest first, each onto the
     least loaded worker that does not hold that expert yet (ties: lower id).
     An expert's first copy is its home.
Without measured loads every expert counts 1.0, which spreads experts evenly.
"""
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgument


def replica_counts(loads, n_workers, replicas):
    """EPLB greedy: copies per expert for `replicas` extra copies (each expert at most n_workers)."""
    loads = np.asarray(loads, dtype=np.float64)
    if replicas < 0:
        raise InvalidArgument(f"replicas must be >= 0, got {replicas}")
    counts = np.ones(len(loads), dtype=np.int64)
    for _ in range(int(replicas)):
        per_copy = np.where(counts < n_workers, loads / counts, -np.inf)
        if not np.isfinite(per_copy).any():
            break  # every expert already on every worker
        counts[int(np.argmax(per_copy))] += 1  # argmax ties -> lower expert id
    return counts


def pack_layer(expert_ids, loads, counts, n_workers):
    """Greedy packing of copies onto workers; returns ({expert: [workers, home first]}, worker_load)."""
    units = sorted(((loads[i] / counts[i], e, i) for i, e in enumerate(expert_ids)
                    for _ in range(int(counts[i]))), key=lambda u: (-u[0], u[1]))
    worker_load = [0.0] * n_workers
    held = [0] * n_workers
    holders = {e: [] for e in expert_ids}
    for per_copy, e, _ in units:
        free = [w for w in range(n_workers) if w not in holders[e]]
        w = min(free, key=lambda w: (worker_load[w], held[w], w))
        holders[e].append(w)
        worker_load[w] += per_copy
        held[w] += 1
    return holders, worker_load


@dataclass
class Placement:
    """replicas[(layer, e)] = tuple of workers, home first."""

    n_workers: int
    replicas: dict = field(default_factory=dict)
    replica_budget: int = 0

    def replicas_of(self, key):
        try:
            return self.replicas[key]
        except KeyError:
            raise InvalidArgument(f"no placement for layer {key[0]} expert {key[1]}") from None

    def home(self, key):
        return self.replicas_of(key)[0]

    def add_expert(self, layer, e):
        """Home a hot-added expert on the worker holding the fewest experts of that layer."""
        held = [0] * self.n_workers
        for (l, _), workers in self.replicas.items():
            if l == layer:
                for w in workers:
                    held[w] += 1
        home = min(range(self.n_workers), key=lambda w: (held[w], w))
        self.replicas[(layer, e)] = (home,)
        return home

    def remove_expert(self, layer, e):
        self.replicas.pop((layer, e), None)

    def experts_on(self, worker):
        return sorted(k for k, ws in self.replicas.items() if worker in ws)

    def to_dict(self):
        return {"n_workers": self.n_workers, "replica_budget": self.replica_budget,
                "replicas": {f"{l}:{e}": list(ws) for (l, e), ws in sorted(self.replicas.items())}}


def plan(experts_by_layer, n_workers, loads=None, replicas=0):
    """Plan every layer. experts_by_layer: {layer: [expert ids]}; loads: {layer: {expert: load}} or None."""
    if int(n_workers) < 1:
        raise InvalidArgument(f"placement needs at least one worker, got {n_workers}")
    out = Placement(int(n_workers), replica_budget=int(replicas))
    for layer, ids in experts_by_layer.items():
        ids = sorted(int(e) for e in ids)
        measured = (loads or {}).get(layer, {})
        vec = np.array([float(measured.get(e, 0.0)) for e in ids]) if measured else np.ones(len(ids))
        if measured and not vec.any():
            vec = np.ones(len(ids))
        counts = replica_counts(vec, out.n_workers, replicas)
        holders, _ = pack_layer(ids, vec, counts, out.n_workers)
        out.replicas.update({(layer, e): tuple(ws) for e, ws in holders.items()})
    return out


class LoadMeter:
    """Recent per-expert token counts per layer, exponentially decayed at each rebalance."""

    def __init__(self, decay=0.5):
        self.decay = float(decay)
        self.counts = {}

    def add(self, layer, expert_ids, tokens):
        table = self.counts.setdefault(layer, {})
        for e, n in zip(expert_ids, tokens):
            table[int(e)] = table.get(int(e), 0.0) + float(n)

    def loads(self):
        return {layer: dict(t) for layer, t in self.counts.items()}

    def age(self):
        for t in self.counts.values():
            for e in t:
                t[e] *= self.decay
