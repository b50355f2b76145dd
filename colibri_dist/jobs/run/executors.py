"""Where a job's MoE layers run: the Ray Pool or the in-process Engine, behind one small interface.

Role in the data flow: the runner opens an executor from the config
(`pool.workers: 0` or `job.executor: engine` = in-process Engine; `pool.name`
set = attach to that running named pool; else a Pool owned by the job),
and the job kinds call `route(layer, x)` and `moe_forward(layer, x)` on it.
`stats()` returns one normalized shape whatever runs underneath:
    {"cache": {hits, misses, evictions, bytes_loaded},
     "workers": [{"id", "tokens", "experts", "cpus", "node"}], "retries": int}
"""
import dataclasses
import os

CACHE_KEYS = ("hits", "misses", "evictions", "bytes_loaded")


def uses_pool(cfg):
    return cfg.job.executor == "pool" and cfg.pool.workers > 0


def attaches_to_named_pool(cfg):
    return uses_pool(cfg) and bool(cfg.pool.name)


def job_w8a8(cfg):
    """The job's arithmetic (job.w8a8; pool.w8a8, when set, must agree): one mode for every layer."""
    from ...errors import InvalidArgument
    job, pool = bool(cfg.job.w8a8), cfg.pool.w8a8
    if pool is not None and bool(pool) != job:
        raise InvalidArgument(f"job.w8a8 is {job} but pool.w8a8 is {pool}: a token's bits would depend on where "
                              f"its MoE layers ran; set one of them (or both alike)", parameter="pool.w8a8",
                              value=pool)
    return job


def open_executor(cfg, model_path, offload_dir):
    """An EngineExecutor or PoolExecutor for this job config (offload_dir already resolved)."""
    if uses_pool(cfg):
        return PoolExecutor(cfg, model_path, offload_dir)
    return EngineExecutor(cfg, model_path, offload_dir)


class EngineExecutor:
    kind = "engine"

    def __init__(self, cfg, model_path, offload_dir):
        from ...engine import Engine
        threads = cfg.job.threads or cfg.pool.threads_per_worker
        self.engine = Engine(model_path, threads=threads, cache_bytes=cfg.pool.cache_bytes,
                             offload_dir=offload_dir, policy=cfg.pool.policy, w8a8=job_w8a8(cfg))
        self.cpus = threads or os.cpu_count() or 1
        self.work = 0
        self.experts_seen = set()

    @classmethod
    def wrap(cls, engine, threads=None):
        """An executor over an Engine someone else owns (the LLM's own); close() leaves it open."""
        self = cls.__new__(cls)
        self.engine, self.cpus, self.work, self.experts_seen = engine, threads or os.cpu_count() or 1, 0, set()
        self.close = lambda: None
        return self

    def route(self, layer, x):
        return self.engine.route(layer, x)

    def moe_forward(self, layer, x):
        self.work += len(x)
        return self.engine.moe_forward(layer, x)

    def stats(self):
        raw = self.engine.stats()
        cache = _cache_of(raw)
        worker = {"id": "engine", "tokens": self.work, "experts": _count_experts(raw),
                  "cpus": self.cpus, "node": 0}
        return {"cache": cache, "workers": [worker], "retries": 0, "raw": raw}

    def close(self):
        self.engine.close()


class PoolExecutor:
    """A pool owned by the job, or (pool.name set) the running named pool of `colibri pool start`."""
    kind = "pool"

    def __init__(self, cfg, model_path, offload_dir):
        from ...pool import Pool
        p = cfg.pool
        if p.name:
            self.pool = _attach_named(p, model_path, job_w8a8(cfg))
            return
        self.pool = Pool(model_path, workers=p.workers, ray_address=p.ray_address, cache_bytes=p.cache_bytes,
                         offload_dir=offload_dir, replicas=p.replicas,
                         balancer={"kind": p.balancer.kind, "window": p.balancer.window,
                                   "threshold": p.balancer.threshold},
                         threads_per_worker=p.threads_per_worker, policy=p.policy,
                         numa=dataclasses.asdict(p.numa), routing_policy=cfg.routing.policy, w8a8=job_w8a8(cfg))

    def route(self, layer, x):
        return self.pool.route(layer, x)

    def moe_forward(self, layer, x):
        return self.pool.moe_forward(layer, x)

    def stats(self):
        raw = self.pool.stats()
        workers = [_worker_of(i, w) for i, w in enumerate(_workers_list(raw))]
        cache = _cache_of(raw) if "cache" in raw else _sum_caches(_workers_list(raw))
        return {"cache": cache, "workers": workers, "retries": int(raw.get("retries", 0) or 0), "raw": raw}

    def close(self):
        self.pool.shutdown()


def _attach_named(p, model_path, w8a8):
    from ...errors import InvalidArgument, PoolError
    from ...pool import Pool, service
    address = service.resolve_address(p.name, p.ray_address)
    if address is None:
        raise PoolError(f"pool.name is {p.name!r} but no pool of that name is running; start it with "
                        f"`colibri pool start CONFIG`, or remove pool.name to let the job start its own pool")
    state = service.read_state(p.name) or {}
    served = state.get("model")
    if served and os.path.realpath(served) != os.path.realpath(model_path):
        raise InvalidArgument(f"pool {p.name!r} serves {served}, but the job's model is {model_path}")
    pool = Pool.attach(p.name, ray_address=address)
    if pool.w8a8 != w8a8:
        pool.shutdown()
        raise InvalidArgument(f"pool {p.name!r} runs w8a8={pool.w8a8} but the job asks job.w8a8={w8a8}: a "
                              f"token's bits would depend on the pool; set job.w8a8: {str(pool.w8a8).lower()} or "
                              f"start the pool with pool.w8a8: {str(w8a8).lower()}", parameter="job.w8a8", value=w8a8)
    return pool


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
