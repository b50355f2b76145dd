"""The LLM a generate/score job runs on, built from the job config.

Role in the data flow: run_job (kinds generate/score) calls `open_job_llm(cfg)` unless a test passes its
own factory: cd.LLM over the model, its MoE layers on the in-process Engine (`pool.workers: 0` or
`job.executor: engine`) or on a Ray pool (`moe=` the job's own PoolExecutor, or the running `pool.name`),
the scheduler settings from `job.batch_tokens`, `job.max_num_seqs`, `job.prefill_chunk`, `job.seed`.
close() shuts the LLM and the pool.
"""
import os

from ..errors import InvalidArgument


def open_job_llm(cfg):
    """cd.LLM for a generate/score job: MoE layers on the in-process Engine (`pool.workers: 0` or
    `job.executor: engine`), else on a Ray pool (the job's own, or the running `pool.name`)."""
    import dataclasses

    from ..model import LLM
    from .executors import PoolExecutor, uses_pool
    if cfg.model is None:
        raise InvalidArgument(f"job.kind {cfg.job.kind!r} needs `model:` (a .colibri whole model)")
    if not os.path.exists(cfg.model):
        raise InvalidArgument(f"model: {cfg.model}: no such file")
    moe = PoolExecutor(cfg, cfg.model, cfg.pool.offload_dir) if uses_pool(cfg) else None
    try:
        llm = LLM(cfg.model, threads=cfg.job.threads or cfg.pool.threads_per_worker,
                  cache_bytes=None if moe else cfg.pool.cache_bytes, offload_dir=None if moe else cfg.pool.offload_dir,
                  policy=cfg.pool.policy, max_num_batched_tokens=cfg.job.batch_tokens,
                  max_num_seqs=cfg.job.max_num_seqs, seed=cfg.job.seed, moe=moe)
    except BaseException:
        if moe is not None:
            moe.close()
        raise
    if cfg.job.prefill_chunk:
        llm.scheduler_config = dataclasses.replace(llm.scheduler_config, prefill_chunk_size=cfg.job.prefill_chunk)
    return _ClosingLLM(llm, moe)


class _ClosingLLM:
    """The LLM plus the pool its MoE layers run on: close() shuts both."""

    def __init__(self, llm, moe):
        self._llm, self._moe = llm, moe

    def __getattr__(self, name):
        return getattr(self._llm, name)

    def signature(self):
        st = os.stat(self._llm.path)
        return {"model": os.path.abspath(self._llm.path), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}

    def close(self):
        try:
            self._llm.close()
        finally:
            if self._moe is not None:
                self._moe.close()
