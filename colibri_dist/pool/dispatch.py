"""Pure-numpy plumbing of one pool layer batch (no Ray here, so it is unit-testable).

Role in the data flow:
    idx[n,k] --group_by_expert--> per expert: (tokens, slots)
    + expert->worker assignment --build_batches--> one request per worker and micro-batch:
        per-expert row lists (and a shared-expert token range) into the layer batch x,
        which travels once, by object reference (zero-copy on the receiving machine)
    worker replies --scatter--> slot_out[t, j, :] and shared[t, :]
The router then calls native.combine(w, slot_out, shared), the same call the
MoeExecutor makes, so the layer output is bit-identical to the MoeExecutor's.
"""
from dataclasses import dataclass, field

import numpy as np


def group_by_expert(idx):
    """{expert: (tokens int64[], slots int64[])}, tokens ascending within each expert."""
    idx = np.asarray(idx)
    k = idx.shape[1]
    flat = idx.ravel()
    order = np.argsort(flat, kind="stable")  # stable: token order kept inside an expert
    experts = flat[order]
    cuts = np.flatnonzero(np.diff(experts)) + 1
    out = {}
    for part in np.split(order, cuts):
        if len(part):
            out[int(flat[part[0]])] = (part // k, part % k)
    return out


def split_hot(groups, n_replicas, n_live):
    """Work units {(expert, part): (tokens, slots)}: an expert with more rows than a fair
    worker share (all rows / live workers) and several replicas is cut into contiguous
    token chunks, at most one per replica, so one hot expert cannot pin a whole layer
    batch on one worker. Rows are per-row independent, so results do not change."""
    total = sum(len(t) for t, _ in groups.values())
    fair = max(1, -(-total // max(1, n_live)))
    units = {}
    for e, (tokens, slots) in groups.items():
        parts = min(n_replicas(e), -(-len(tokens) // fair))
        if parts <= 1:
            units[(e, 0)] = (tokens, slots)
            continue
        for i, (t, s) in enumerate(zip(np.array_split(tokens, parts), np.array_split(slots, parts))):
            units[(e, i)] = (t, s)
    return units


def shared_chunks(n_tokens, workers):
    """Split tokens 0..n into contiguous chunks, one per worker in `workers` order: {worker: (start, stop)}."""
    workers = list(workers)
    bounds = np.linspace(0, n_tokens, len(workers) + 1).round().astype(np.int64)
    return {w: (int(a), int(b)) for w, a, b in zip(workers, bounds[:-1], bounds[1:]) if b > a}


@dataclass
class WorkerBatch:
    """What one worker computes for one micro-batch, and where its answers go back."""

    worker: int
    experts: list = field(default_factory=list)  # [(expert, micro-batch tokens, slots)]
    shared: tuple = None                    # (start, stop) micro-batch token range or None

    def request(self, layer, version, offset=0):
        """The message sent to the worker with the layer batch x (shipped once, by reference):
        per-expert row lists and the shared-expert range, as indices into that x."""
        experts = [(int(e), (tokens + offset).astype(np.int32)) for e, tokens, _ in self.experts]
        shared = None if self.shared is None else (self.shared[0] + offset, self.shared[1] + offset)
        return {"layer": int(layer), "version": int(version), "experts": experts, "shared": shared}

    def n_rows(self):
        return sum(len(t) for _, t, _ in self.experts)


def build_batches(groups, assignment, shared=None):
    """groups {expert or (expert, part): (tokens, slots)} (group_by_expert / split_hot),
    assignment {same key: worker}, shared {worker: (start, stop)}."""
    batches = {}
    for key in sorted(groups):
        tokens, slots = groups[key]
        w = assignment[key]
        e = key[0] if isinstance(key, tuple) else key
        batches.setdefault(w, WorkerBatch(w)).experts.append((e, tokens, slots))
    for w, span in (shared or {}).items():
        batches.setdefault(w, WorkerBatch(w)).shared = span
    return batches


def scatter(batch, reply, slot_out, shared_out):
    """Write a worker reply into slot_out[t, j] (and shared_out rows) in place."""
    out = reply["out"]
    pos = 0
    for _, tokens, slots in batch.experts:
        slot_out[tokens, slots] = out[pos:pos + len(tokens)]
        pos += len(tokens)
    if pos != len(out):
        raise ValueError(f"worker {batch.worker} returned {len(out)} expert rows, expected {pos}")
    if batch.shared is not None:
        start, stop = batch.shared
        shared_out[start:stop] = reply["shared"]
