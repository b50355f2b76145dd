"""EngineArgs: every setting of one engine and where its experts run, as plain data (vLLM's EngineArgs).

Role in the data flow: the one object every entry point builds before a model is opened: Python keywords
(EngineArgs(model=..., workers=2)), CLI flags (cli/engine_flags.py generates the flags from these fields),
serve options (ServeConfig.engine_args()), and YAML job/service configs (`of_job`, `of_service`: the one
mapping of the `pool:` section). front.open_llm(args) opens it; llm_kwargs() is what reaches cd.LLM (through
LLM.from_args, and the sequence runners' LLMs), pool_kwargs() what reaches a Pool.

    args = EngineArgs(model="m.colibri", workers=2, cache_bytes=1 << 30, offload_compression="zstd")
    args.llm_kwargs()    # cd.LLM keywords (the expert store's only when the experts run in process)
    args.pool_kwargs()   # Pool / PoolConfig keywords of the workers a job or server starts
"""
import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from ..encodings import KV_CACHE_DTYPES
from ..errors import InvalidArgument


def _f(default, help, flag=True, metavar=None, group="engine", **more):
    """A field with what its CLI flag says (flag=False: no flag; a str: that flag's spelling)."""
    return field(default=default, metadata=dict(help=help, flag=flag, metavar=metavar, group=group, **more))


@dataclass(frozen=True)
class EngineArgs:
    model: Optional[str] = _f(None, ".colibri model", flag=False)
    # ---- the engine (one per process, runner or replica)
    threads: Optional[int] = _f(None, "native threads (default: all cores)", metavar="N")
    w8a8: bool = _f(True, "exact-weights mode: f32 activations on the decoded int8/int4 weights "
                          "(default: w8a8/w4a8)", flag="--weights-only", negate=True)
    seed: int = _f(0, "base seed of requests that give none", flag=False)
    max_num_seqs: int = _f(64, "sequences decoding at once (the engine's batch)", metavar="N")
    max_num_batched_tokens: int = _f(2048, "tokens per model step (decode tokens + prefill chunks)", metavar="N")
    prefill_chunk: Optional[int] = _f(None, "most prompt tokens of one sequence per step (default: the step's "
                                            "budget)", metavar="N")
    kv_cache_bytes: Optional[int] = _f(None, "KV cache budget in bytes (default: sized to the batch)",
                                       metavar="SIZE", size=True)
    kv_cache_dtype: str = _f("f32", "KV cache element type", choices=KV_CACHE_DTYPES)
    max_seq_len: Optional[int] = _f(None, "longest sequence (default: the model's context)", metavar="N")
    enable_prefix_caching: Optional[bool] = _f(None, "automatic prefix caching (default: on when safe)",
                                               flag=False)
    max_logprobs: int = _f(20, "most logprobs / prompt_logprobs a request may ask (vLLM's; default 20)",
                           metavar="N")
    # ---- the expert store: in this process, or each worker's
    cache_bytes: Optional[int] = _f(None, "RAM budget of the experts (in process, or each worker's; default: "
                                          "serve them from the mmap'd file)", metavar="SIZE", group="store",
                                    size=True)
    offload_dir: Optional[str] = _f(None, "spill experts evicted from RAM here (the SSD tier)", metavar="DIR",
                                    group="store")
    offload_compression: Optional[str] = _f(None, "compress spilled experts", choices=("zstd",), group="store")
    policy: str = _f("lru", "expert cache eviction policy", choices=("lru", "lfu", "lfru"), group="store")
    # ---- where the experts run
    workers: int = _f(0, "expert workers on a Ray pool started here (0 = in process)", metavar="N",
                      group="placement")
    pool: Optional[str] = _f(None, "run the experts on this running named pool (`colibri pool start`)",
                             metavar="NAME", group="placement")
    runners: int = _f(0, "persistent engines (Ray sequence runners over the pool's workers); needs --workers "
                         "or --pool", flag=False, group="placement")
    ray_address: Optional[str] = _f(None, "Ray cluster to start or find the pool on", flag=False, group="placement")
    pool_options: dict = field(default_factory=dict, metadata=dict(flag=False, group="placement",
                                                                   help="every further PoolConfig field of a "
                                                                        "pool started here"))

    def __post_init__(self):
        for name in ("workers", "runners"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidArgument(f"{name} must be an integer >= 0, got {v!r}", parameter=name, value=v)
        if self.workers and self.pool:
            raise InvalidArgument("workers and pool exclude each other (pool attaches to running workers)",
                                  parameter="pool", value=self.pool)
        if self.runners and not (self.workers or self.pool):
            raise InvalidArgument(f"runners {self.runners} needs the Ray pool the runners share: give workers N "
                                  f"(--workers N) or a running pool NAME (--pool NAME)", parameter="runners",
                                  value=self.runners)
        if self.offload_compression in ("none", ""):
            object.__setattr__(self, "offload_compression", None)
        bad = sorted(set(self.pool_options) & _OWN_POOL_KEYS)
        if bad:
            raise InvalidArgument(f"pool_options {bad} are EngineArgs fields: set them there", parameter="pool_options")

    @property
    def in_process(self):
        """True when this process's own MoeExecutor runs the MoE layers."""
        return not (self.workers or self.pool)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def llm_kwargs(self):
        """cd.LLM keywords (moe= aside): the same in process, on every runner and replica (same bits)."""
        kw = dict(threads=self.threads, w8a8=self.w8a8, seed=self.seed, max_num_seqs=self.max_num_seqs,
                  max_num_batched_tokens=self.max_num_batched_tokens, prefill_chunk_size=self.prefill_chunk,
                  kv_cache_bytes=self.kv_cache_bytes, kv_cache_dtype=self.kv_cache_dtype,
                  max_seq_len=self.max_seq_len, enable_prefix_caching=self.enable_prefix_caching,
                  max_logprobs=self.max_logprobs)
        if self.in_process:
            kw.update(cache_bytes=self.cache_bytes, offload_dir=self.offload_dir, policy=self.policy,
                      offload_compression=self.offload_compression)
        return kw

    def pool_kwargs(self):
        """Pool / PoolConfig keywords of the workers started for these args (workers > 0)."""
        kw = dict(workers=self.workers, threads_per_worker=self.threads, cache_bytes=self.cache_bytes,
                  offload_dir=self.offload_dir, compression=self.offload_compression, policy=self.policy,
                  w8a8=self.w8a8)
        kw.update(self.pool_options)
        return kw


_OWN_POOL_KEYS = {"workers", "cache_bytes", "offload_dir", "compression", "policy", "w8a8"}


def pool_section_options(p, routing_policy="exact"):
    """The YAML `pool:` section's settings beyond EngineArgs' own fields -> PoolConfig keywords (the one
    mapping; `colibri pool start`, jobs, stress and serve all use it)."""
    return dict(threads_per_worker=p.threads_per_worker, replicas=p.replicas, routing_policy=routing_policy,
                balancer={"kind": p.balancer.kind, "window": p.balancer.window, "threshold": p.balancer.threshold},
                numa={"enabled": p.numa.enabled, "workers_per_node": p.numa.workers_per_node,
                      "mem_policy": p.numa.mem_policy, "sysfs_root": p.numa.sysfs_root},
                worker_resources="auto" if p.numa.enabled else None)


def of_service(cfg, **changes):
    """A service config (`colibri pool start` CONFIG: model + pool: + routing:) -> EngineArgs of its pool."""
    p = cfg.pool
    args = EngineArgs(model=cfg.model, workers=p.workers, cache_bytes=p.cache_bytes, offload_dir=p.offload_dir,
                      offload_compression=p.offload_compression, policy=p.policy,
                      w8a8=True if p.w8a8 is None else p.w8a8, ray_address=p.ray_address,
                      pool_options=pool_section_options(p, cfg.routing.policy))
    return args.replace(**changes) if changes else args


def job_placement(cfg):
    """(workers, pool name) of a job config: (0, None) in process (job.executor engine or pool.workers 0),
    (0, NAME) on the running pool pool.name, (N, None) on N workers the job starts."""
    p = cfg.pool
    if cfg.job.executor != "pool" or p.workers <= 0:
        return 0, None
    return (0, p.name) if p.name else (p.workers, None)


def of_job(cfg):
    """A job config (JobConfig) -> the EngineArgs of its engine: job: the engine, pool: where and how its
    experts run (job.executor engine or pool.workers 0: in process; pool.name: that running pool)."""
    job, p = cfg.job, cfg.pool
    w8a8 = bool(job.w8a8)
    if p.w8a8 is not None and bool(p.w8a8) != w8a8:
        raise InvalidArgument(f"job.w8a8 is {w8a8} but pool.w8a8 is {p.w8a8}: a token's bits would depend on where "
                              f"its MoE layers ran; set one of them (or both alike)", parameter="pool.w8a8",
                              value=p.w8a8)
    workers, pool = job_placement(cfg)
    return EngineArgs(model=cfg.model, threads=job.threads or p.threads_per_worker, w8a8=w8a8, seed=job.seed,
                      max_num_seqs=job.max_num_seqs, max_num_batched_tokens=job.batch_tokens,
                      prefill_chunk=job.prefill_chunk, kv_cache_bytes=job.kv_cache_bytes,
                      kv_cache_dtype=job.kv_cache_dtype, max_seq_len=job.max_seq_len,
                      cache_bytes=p.cache_bytes, offload_dir=p.offload_dir,
                      offload_compression=p.offload_compression, policy=p.policy,
                      workers=workers, pool=pool,
                      ray_address=p.ray_address, pool_options=pool_section_options(p, cfg.routing.policy))
