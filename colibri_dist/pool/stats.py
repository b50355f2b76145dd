"""Pool statistics: per-worker facts from the workers + counters summed over every ExpertClient.

Role: with routing in each caller (driver or sequence runner) no single actor sees all
traffic, so the facades ask every client for its counters (ExpertClient.counters()) and
merge them here into the one stats() shape documented in docs/POOL.md. No ray here.
"""


def merge_counters(counters):
    """Sum a list of ExpertClient.counters() dicts (lists elementwise, timings per key)."""
    counters = [c for c in counters if c]
    if not counters:
        return {}
    out = {k: counters[0][k] for k in ("placement", "balancer")}
    for key in ("tokens", "last_batch_tokens", "busy_s"):
        out[key] = [sum(vals) for vals in zip(*(c[key] for c in counters))]
    for key in ("retries", "batches", "off_home", "rebalances"):
        out[key] = sum(c[key] for c in counters)
    out["timing"] = {k: sum(c["timing"].get(k, 0.0) for c in counters) for k in counters[0]["timing"]}
    out["down"] = sorted(set().union(*(c["down"] for c in counters)))
    out["clients"] = len(counters)
    return out


def pool_stats(worker_entries, counters, version, routing_policy, experts, routing_at, config=None):
    """The stats() dict: worker_entries from ExpertClient.worker_stats(), counters merged."""
    c = merge_counters(counters)
    placement = c.get("placement")
    workers = []
    for e in worker_entries:
        i = e["index"]
        e = dict(e, tokens=c["tokens"][i], last_batch_tokens=c["last_batch_tokens"][i], busy_s=c["busy_s"][i],
                 experts=len(placement.experts_on(i)) if placement is not None else 0)
        if i in c.get("down", ()):
            e["alive"] = False
        workers.append(e)
    return {"workers": workers, "retries": c["retries"], "batches": c["batches"], "tokens": sum(c["tokens"]),
            "version": version, "rebalances": c["rebalances"], "off_home": c["off_home"], "timing": c["timing"],
            "placement": placement.to_dict() if placement is not None else None, "balancer": c["balancer"],
            "routing_policy": routing_policy, "routing_at": routing_at, "clients": c["clients"],
            "experts": {str(l): len(ids) for l, ids in experts.items()}, "config": config}
