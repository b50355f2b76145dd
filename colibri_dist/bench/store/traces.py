"""Expert access traces and a cache simulator for the store benchmark.

Role in the data flow: `python -m colibri_dist.bench store` replays traces
through the same policy classes ExpertStore uses (store/policies.py) and
places them against Belady's optimum (evict the entry used farthest in the
future) and the uniform-popularity line c/N.

A trace is a list of steps (layer, sorted expert ids): the union of one batch's
experts at one MoE layer, in the order the engine visits them. Prefetch in the
simulator mirrors the engine: before step i runs, the lookahead prediction made
at step i-1 is loaded and protected until its first use (or two steps later).
"""
import numpy as np

from ...store.policies import make_policy


def zipf_trace(n_layers=8, n_experts=64, top_k=4, batch=4, steps=400, s=1.1, locality=0.6,
               drift=0.02, seed=0):
    """Synthetic trace: per-layer Zipf(s) expert popularity (random rank order per
    layer, slowly drifting), and temporal locality: with probability `locality` a
    token reuses the expert choice of a token in the previous batch."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, n_experts + 1, dtype=np.float64)
    p = ranks ** -s
    p /= p.sum()
    perms = [rng.permutation(n_experts) for _ in range(n_layers)]
    prev = [[None] * batch for _ in range(n_layers)]
    trace = []
    for _ in range(steps // n_layers):
        for layer in range(n_layers):
            if rng.random() < drift:                       # popularity shifts: swap two ranks
                a, b = rng.integers(0, n_experts, 2)
                perms[layer][[a, b]] = perms[layer][[b, a]]
            used = set()
            for t in range(batch):
                old = prev[layer][int(rng.integers(0, batch))]
                if old is not None and rng.random() < locality:
                    choice = old
                else:
                    choice = perms[layer][rng.choice(n_experts, size=top_k, replace=False, p=p)]
                prev[layer][t] = choice
                used.update(int(e) for e in choice)
            trace.append((layer, sorted(used)))
    return trace


def noisy_predictions(trace, recall, n_experts, seed=0):
    """Lookahead stand-in for synthetic traces: each expert of step i+1 is predicted
    with probability `recall`; misses are replaced by random wrong experts."""
    rng = np.random.default_rng(seed)
    preds = [None]
    for layer, experts in trace[1:]:
        keep = [e for e in experts if rng.random() < recall]
        wrong = [int(e) for e in rng.choice(n_experts, size=len(experts) - len(keep), replace=True)]
        preds.append((layer, sorted(set(keep + wrong))))
    return preds


def accesses(trace):
    return [(layer, e) for layer, experts in trace for e in experts]


def belady_hits(seq, capacity):
    """Hits of the optimal offline policy on an access sequence."""
    if capacity <= 0:
        return 0
    nxt, last = [0] * len(seq), {}
    for i in range(len(seq) - 1, -1, -1):
        nxt[i] = last.get(seq[i], float("inf"))
        last[seq[i]] = i
    cache, hits = {}, 0          # key -> next use
    for i, key in enumerate(seq):
        if key in cache:
            hits += 1
        elif len(cache) >= capacity:
            victim = max(cache, key=cache.get)
            del cache[victim]
        cache[key] = nxt[i]
    return hits


def simulate(trace, capacity, policy, predictions=None, protect_steps=2):
    """Demand hit rate and loads per access of a policy; predictions[i] (layer,
    experts) is prefetched before step i (a prefetch that finds no room is
    dropped, not loaded). As in the engine, an entry is held only while its
    expert runs (one at a time), so nothing else is pinned. Prefetch
    turns misses into hits by loading ahead: loads_per_access shows the reads
    it costs (without prefetch it is exactly 1 - hit_rate)."""
    pol = make_policy(policy)
    cached, protected = set(), {}
    hits = loads = demand = prefetched_used = 0

    def admit(key):
        """Cache key if room can be made (False: served uncached, like the store's bypass)."""
        if len(cached) >= capacity:
            for v in pol.victims():
                if protected.get(v, -1) < step:
                    cached.discard(v)
                    pol.remove(v)
                    protected.pop(v, None)
                    break
            else:
                return False
        cached.add(key)
        pol.insert(key)
        return True

    for step, (layer, experts) in enumerate(trace):
        if predictions is not None and predictions[step] is not None:
            pl, pe = predictions[step]
            for e in pe:
                key = (pl, e)
                if key not in cached and admit(key):
                    loads += 1
                    protected[key] = step + protect_steps
        for e in experts:
            key = (layer, e)
            demand += 1
            if key in cached:
                hits += 1
                pol.access(key)
                if protected.pop(key, None) is not None:
                    prefetched_used += 1
            else:
                loads += 1                  # a miss reads the expert, cached or not
                admit(key)
    return {"hit_rate": hits / max(1, demand), "loads_per_access": loads / max(1, demand),
            "prefetch_used": prefetched_used}


def place_policies(trace, n_total, fractions, predictions=None, policies=("lru", "lfu", "lfru")):
    """Hit rates at cache sizes c = fraction * n_total entries for every policy
    (with and without prefetch), Belady's optimum and the uniform line c/N."""
    seq = accesses(trace)
    rows = []
    for f in fractions:
        c = max(1, int(round(f * n_total)))
        row = {"fraction": f, "capacity": c, "uniform": c / n_total,
               "belady": belady_hits(seq, c) / len(seq)}
        for p in policies:
            row[p] = simulate(trace, c, p)["hit_rate"]
            if predictions is not None:
                sim = simulate(trace, c, p, predictions)
                row[f"{p}+prefetch"] = sim["hit_rate"]
                row[f"{p}+prefetch_loads"] = sim["loads_per_access"]
        rows.append(row)
    return rows
