"""Where a job's MoE layers run: the Ray Pool or the in-process MoeExecutor, behind one small interface.

Role in the data flow: the runner opens an executor from the config
(`pool.workers: 0` or `job.executor: engine` = in-process MoeExecutor; `pool.name`
set = attach to that running named pool; else a Pool owned by the job),
and the MoE kinds call `moe_forward(layer, x)` on it; `heat_report()` is what the
MoeExecutor or the pool client counted where it routed (routing/heat.py).
`stats()` returns one normalized shape whatever runs underneath:
    {"cache": {hits, misses, evictions, bytes_loaded},
     "workers": [{"id", "tokens", "experts", "cpus", "node"}], "retries": int}
"""
import os

from ...config.engine_args import job_placement

CACHE_KEYS = ("hits", "misses", "evictions", "bytes_loaded")


def uses_pool(cfg):
    return any(job_placement(cfg))


def attaches_to_named_pool(cfg):
    return job_placement(cfg)[1] is not None


def open_executor(cfg, model_path, offload_dir):
    """An InProcessExecutor or PoolExecutor for this job config (offload_dir already resolved): the MoE
    executor front.open_experts opens for EngineArgs.of_job(cfg)."""
    from ...config.engine_args import of_job
    from ...front import open_experts
    args = of_job(cfg).replace(model=model_path, offload_dir=offload_dir)
    experts = open_experts(args)
    return InProcessExecutor(experts, args.threads) if args.in_process else PoolExecutor(experts)


def view_of(llm, threads=None):
    """The executor view (stats, heat) of where an opened LLM's MoE layers run; None for a stand-in LLM."""
    moe = getattr(llm, "moe", None)
    if moe is not None:
        return PoolExecutor.wrap(moe)
    return InProcessExecutor.wrap(llm.executor, threads) if getattr(llm, "executor", None) is not None else None


class InProcessExecutor:
    kind = "engine"

    def __init__(self, engine, threads=None, owned=True):
        """engine: the in-process MoeExecutor; owned=False: close() leaves it open (the LLM's own)."""
        self.executor, self.cpus, self.owned = engine, threads or os.cpu_count() or 1, owned

    @classmethod
    def wrap(cls, engine, threads=None):
        return cls(engine, threads, owned=False)

    def moe_forward(self, layer, x):
        return self.executor.moe_forward(layer, x)

    def count_heat(self):
        self.executor.count_heat()

    def heat_report(self):
        return self.executor.heat.report()

    def stats(self):
        raw = self.executor.stats()
        cache = _cache_of(raw)
        worker = {"id": "engine", "tokens": self.executor.heat.rows, "experts": _count_experts(raw),
                  "cpus": self.cpus, "node": 0}
        return {"cache": cache, "workers": [worker], "retries": 0, "raw": raw}

    def close(self):
        if self.owned:
            self.executor.close()


class PoolExecutor:
    """A pool the job started, or (pool.name set) the running named pool of `colibri pool start`."""
    kind = "pool"

    def __init__(self, pool, owned=True):
        self.pool, self.owned = pool, owned

    @classmethod
    def wrap(cls, pool):
        return cls(pool, owned=False)

    def moe_forward(self, layer, x):
        return self.pool.moe_forward(layer, x)

    def count_heat(self):
        self.pool.count_heat()

    def heat_report(self):
        return self.pool.heat()

    def stats(self):
        raw = self.pool.stats()
        workers = [_worker_of(i, w) for i, w in enumerate(_workers_list(raw))]
        cache = _cache_of(raw) if "cache" in raw else _sum_caches(_workers_list(raw))
        return {"cache": cache, "workers": workers, "retries": int(raw.get("retries", 0) or 0), "raw": raw}

    def close(self):
        if self.owned:
            self.pool.shutdown()


def _cache_of(raw):
    cache = raw.get("cache", raw) if isinstance(raw, dict) else {}
    return {k: int(cache.get(k, 0) or 0) for k in CACHE_KEYS}


def _sum_caches(workers):
    total = dict.fromkeys(CACHE_KEYS, 0)
    for w in workers:
        for k, v in _cache_of(w).items():
            total[k] += v
    return total


def _workers_list(raw):
    workers = raw.get("workers", [])
    return list(workers.values()) if isinstance(workers, dict) else list(workers)


def _count_experts(raw):
    value = raw.get("experts", raw.get("resident", 0)) if isinstance(raw, dict) else 0
    return len(value) if isinstance(value, (list, tuple, set, dict)) else int(value or 0)


def _worker_of(i, w):
    return {"id": w.get("id", w.get("index", i)), "tokens": int(w.get("tokens", w.get("rows", 0)) or 0),
            "experts": _count_experts(w), "cpus": w.get("cpus"), "node": w.get("node")}
