"""The LLM a generate/score job runs on, opened from the job config through the front door.

Role in the data flow: run_job (kinds generate/score) calls `open_job_llm(cfg, offload_dir)` unless a
test passes its own factory: EngineArgs.of_job(cfg) -> front.open_llm: cd.LLM over the model, its MoE
layers on the in-process MoeExecutor (`pool.workers: 0` or `job.executor: engine`) or on a Ray pool (the job's
own, or the running `pool.name`), the scheduler settings from `job.batch_tokens`, `job.max_num_seqs`,
`job.prefill_chunk`, `job.seed`. Nothing is planted in the decoder: the expert heat the report shows is
counted where the routing happens (the MoeExecutor, or the pool's client: executors.view_of(llm)). close()
shuts the LLM and a pool started for it.
"""
from ...errors import InvalidArgument


def open_job_llm(cfg, offload_dir=None, log=None):
    """cd.LLM for a generate/score job. offload_dir: the resolved spill dir (default: pool.offload_dir);
    log(text): the KV budget line."""
    from ...config.engine_args import of_job
    from ...front import open_llm
    if cfg.model is None:
        raise InvalidArgument(f"job.kind {cfg.job.kind!r} needs `model:` (a .colibri whole model)")
    args = of_job(cfg)
    llm = open_llm(args.replace(offload_dir=offload_dir or args.offload_dir))
    if log is not None:
        log(kv_line(llm, cfg.job))
    return llm


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
