"""The LLM a generate/score job runs on, built from the job config, with its MoE calls metered.

Role in the data flow: run_job (kinds generate/score) calls `open_job_llm(cfg, offload_dir)` unless a
test passes its own factory: cd.LLM over the model, its MoE layers on the in-process Engine
(`pool.workers: 0` or `job.executor: engine`) or on a Ray pool (`moe=` the job's own PoolExecutor, or
the running `pool.name`), the scheduler settings from `job.batch_tokens`, `job.max_num_seqs`,
`job.prefill_chunk`, `job.seed`. Every MoE layer call goes through a MoeMeter (tokens routed to each
expert for the heat map, routed locally by the LLM's Engine with the container's routing table so a pool
pays no extra round trip; the executor's normalized stats for cache hit rate and worker load), which
never changes a bit of the result. close() shuts the LLM and the pool.
"""
import os

import numpy as np

from ...errors import InvalidArgument


def open_job_llm(cfg, offload_dir=None, log=None):
    """cd.LLM for a generate/score job: MoE layers on the in-process Engine (`pool.workers: 0` or
    `job.executor: engine`), else on a Ray pool (the job's own, or the running `pool.name`).
    offload_dir: the resolved spill dir (default: pool.offload_dir); log(text): the KV budget line."""
    import dataclasses

    from ...model import LLM
    from ..run.executors import EngineExecutor, PoolExecutor, job_w8a8, uses_pool
    if cfg.model is None:
        raise InvalidArgument(f"job.kind {cfg.job.kind!r} needs `model:` (a .colibri whole model)")
    if not os.path.exists(cfg.model):
        raise InvalidArgument(f"model: {cfg.model}: no such file")
    job_w8a8(cfg)                        # a pool.w8a8 that disagrees is refused before any pool starts
    offload_dir = offload_dir or cfg.pool.offload_dir
    pool = PoolExecutor(cfg, cfg.model, offload_dir) if uses_pool(cfg) else None
    threads = cfg.job.threads or cfg.pool.threads_per_worker
    meter = MoeMeter(pool, heat=cfg.report.expert_heat) if pool is not None else None
    try:
        llm = LLM(cfg.model, threads=threads, cache_bytes=None if pool else cfg.pool.cache_bytes,
                  offload_dir=None if pool else offload_dir, policy=cfg.pool.policy,
                  max_num_batched_tokens=cfg.job.batch_tokens, max_num_seqs=cfg.job.max_num_seqs,
                  seed=cfg.job.seed, moe=meter, **kv_settings(cfg.job))
    except BaseException:
        if pool is not None:
            pool.close()
        raise
    if meter is None:                    # the LLM's own Engine runs the MoE layers: meter that
        meter = MoeMeter(EngineExecutor.wrap(llm.engine, threads), heat=cfg.report.expert_heat)
        llm.decoder.moe = meter
    meter.router = llm.engine            # heat: route locally (no extra round trip to a pool)
    if log is not None:
        log(kv_line(llm, cfg.job))
    if cfg.job.prefill_chunk:
        llm.scheduler_config = dataclasses.replace(llm.scheduler_config, prefill_chunk_size=cfg.job.prefill_chunk)
    return _ClosingLLM(llm, pool, meter)


def kv_settings(job):
    """The LLM keyword arguments of job.kv_cache_bytes / kv_cache_dtype / max_seq_len / w8a8."""
    return {"kv_cache_bytes": job.kv_cache_bytes, "kv_cache_dtype": job.kv_cache_dtype,
            "max_seq_len": job.max_seq_len, "w8a8": bool(job.w8a8)}


def kv_line(llm, job):
    """What the KV cache holds, and whether it caps a sequence below what the job or the model asks."""
    cache, arch = llm.cache, llm.arch
    want = job.max_seq_len or arch.max_position_embeddings
    budget = f"KV cache {cache.n_blocks} blocks x {cache.block_size} tokens ({job.kv_cache_dtype}"
    budget += ", job.kv_cache_bytes)" if job.kv_cache_bytes else ", the default budget)"
    if llm.max_seq_len < want:
        return (f"warning: {budget} holds {llm.max_seq_len} tokens per sequence, less than the "
                f"{want} asked ({'job.max_seq_len' if job.max_seq_len else 'the model'}): longer generations stop "
                f"there with finish_reason 'length'; raise job.kv_cache_bytes (--kv-cache-bytes) to lift it")
    return f"{budget}; max_seq_len {llm.max_seq_len}"


class MoeMeter:
    """What the decoder calls for every MoE layer: counts tokens per routed expert, then the executor."""

    def __init__(self, executor, heat=True, router=None):
        self.executor, self.heat_enabled, self.heat = executor, heat, {}
        self.router = router or executor     # anything with route(layer, x) -> (idx, w)

    def moe_forward(self, layer, x):
        if self.heat_enabled and len(x):
            idx, _ = self.router.route(layer, x)
            counts = np.bincount(np.asarray(idx).ravel())
            old = self.heat.get(layer)
            if old is None or len(old) < len(counts):
                grown = np.zeros(len(counts) if old is None else max(len(counts), len(old)), np.int64)
                if old is not None:
                    grown[:len(old)] = old
                old = self.heat[layer] = grown
            old[:len(counts)] += counts
        return self.executor.moe_forward(layer, x)

    def stats(self):
        return self.executor.stats()

    def heat_report(self):
        return {str(l): self.heat[l].tolist() for l in sorted(self.heat)} if self.heat_enabled else None


class _ClosingLLM:
    """The LLM plus the pool its MoE layers run on: close() shuts both."""

    def __init__(self, llm, pool, meter):
        self._llm, self._pool, self.moe_meter = llm, pool, meter

    def __getattr__(self, name):
        return getattr(self._llm, name)

    def close(self):
        try:
            self._llm.close()
        finally:
            if self._pool is not None:
                self._pool.close()
