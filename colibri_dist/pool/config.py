"""PoolConfig: every pool option in one validated, immutable object (no ray here).

Role in the data flow: the Pool facade (and the runner pool) builds one PoolConfig,
validates it once, and ships it whole to the Router, the ExpertWorkers and the
sequence runners; none of them re-reads loose keyword arguments or `.get(default)`s.
Test-only knobs live in one field, `hooks` (PoolHooks).

    cfg = PoolConfig(workers=2, balancer={"kind": "token-bucket", "threshold": 1.3})
    cfg = PoolConfig(**engine_args.of_service(service_cfg).pool_kwargs())   # the YAML pool: section -> this
    cfg.replace(workers=4)                                                     # a validated copy
"""
import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from ..errors import InvalidArgument
from .names import check_name

ROUTING_POLICIES = ("exact", "balanced")
ROUTING_AT = ("caller", "router")
STORE_POLICIES = ("lru", "lfu", "lfru")


def _int(name, v, low, allow_none=False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise InvalidArgument(f"pool.{name} must be an integer >= {low}{' or None' if allow_none else ''}, got {v!r}",
                              parameter=f"pool.{name}", value=v)
    return int(v)


def _float(name, v, low=0.0):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v) >= low:
        raise InvalidArgument(f"pool.{name} must be a number >= {low}, got {v!r}", parameter=f"pool.{name}", value=v)
    return float(v)


@dataclass(frozen=True)
class PoolHooks:
    """Test hooks: widen timing windows for fault tests; never change results."""

    worker_delay_s: float = 0.0   # each ExpertWorker sleeps this long per request
    source_delay_s: float = 0.0   # each worker's expert store sleeps this long per source read
    runner_step_delay_s: float = 0.0  # each sequence runner sleeps this long per scheduler step
    # simulation (bench pool --sim): workers sleep call_s + rows x row_s INSTEAD of computing and
    # return zeros; never set outside the simulation (outputs are then meaningless)
    simulate_call_s: float = 0.0
    simulate_row_s: float = 0.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _float(f"hooks.{f.name}", getattr(self, f.name)))


@dataclass(frozen=True)
class PoolConfig:
    workers: int = 2
    threads_per_worker: Optional[int] = None   # None = cores // workers
    cache_bytes: Optional[int] = None           # each worker's RAM budget; None = serve from the mmap
    offload_dir: Optional[str] = None           # each worker spills under <dir>/worker-<i>/
    compression: Optional[str] = None           # None | "zstd" (spill files)
    policy: str = "lru"
    w8a8: bool = True                           # the workers' MoeExecutor(w8a8=): False = exact weights
    replicas: int = 0
    balancer: object = "token-bucket"           # kind string or {kind, window, threshold}
    routing_policy: str = "exact"
    routing_at: str = "caller"                  # "caller": each caller routes for itself; "router": the Router does
    micro_batch: int = 1024
    coalesce_rows: int = 16                     # micro-batches of <= this many rows go to one worker
    min_request_rows: int = 0                   # > 0: at most rows // this many workers per micro-batch
    numa: dict = field(default_factory=lambda: {"enabled": True})
    worker_resources: object = None             # None | "numa" | "auto" | [dict per worker]
    worker_numa_nodes: Optional[tuple] = None   # resolved from worker_resources by the facade
    max_restarts: int = 3
    restart_timeout_s: float = 120.0
    name: Optional[str] = None
    namespace: str = "colibri"
    hooks: PoolHooks = field(default_factory=PoolHooks)

    def __post_init__(self):
        from ..routing.balancer import make_balancer
        s = lambda k, v: object.__setattr__(self, k, v)
        s("workers", _int("workers", self.workers, 1))
        s("threads_per_worker", _int("threads_per_worker", self.threads_per_worker, 1, allow_none=True))
        s("cache_bytes", _int("cache_bytes", self.cache_bytes, 0, allow_none=True))
        s("replicas", _int("replicas", self.replicas, 0))
        s("micro_batch", _int("micro_batch", self.micro_batch, 1))
        s("coalesce_rows", _int("coalesce_rows", self.coalesce_rows, 0))
        s("min_request_rows", _int("min_request_rows", self.min_request_rows, 0))
        s("max_restarts", _int("max_restarts", self.max_restarts, -1))
        s("restart_timeout_s", _float("restart_timeout_s", self.restart_timeout_s))
        if self.compression in ("none", ""):
            s("compression", None)
        if self.compression not in (None, "zstd"):
            raise InvalidArgument(f"pool.compression must be None or 'zstd', got {self.compression!r}",
                                  parameter="pool.compression", value=self.compression)
        if not isinstance(self.w8a8, bool):
            raise InvalidArgument(f"pool.w8a8 must be true or false, got {self.w8a8!r}", parameter="pool.w8a8",
                                  value=self.w8a8)
        if self.policy not in STORE_POLICIES:
            raise InvalidArgument(f"pool.policy must be one of {', '.join(STORE_POLICIES)}, got {self.policy!r}",
                                  parameter="pool.policy", value=self.policy)
        if self.routing_policy not in ROUTING_POLICIES:
            raise InvalidArgument(f"routing.policy must be 'exact' or 'balanced', got {self.routing_policy!r}",
                                  parameter="routing.policy", value=self.routing_policy)
        if self.routing_at not in ROUTING_AT:
            raise InvalidArgument(f"pool.routing_at must be 'caller' or 'router', got {self.routing_at!r}",
                                  parameter="pool.routing_at", value=self.routing_at)
        make_balancer(self.balancer, self.workers)  # InvalidArgument naming the bad key
        if self.name is not None:
            check_name(self.name, "pool.name")
        if self.numa is None:
            s("numa", {"enabled": True})
        if not isinstance(self.numa, dict):
            raise InvalidArgument(f"pool.numa must be a mapping, got {self.numa!r}", parameter="pool.numa",
                                  value=self.numa)
        wr = self.worker_resources
        if not (wr is None or wr in ("numa", "auto") or (isinstance(wr, (list, tuple)) and len(wr) == self.workers
                                                          and all(d is None or isinstance(d, dict) for d in wr))):
            raise InvalidArgument(f"pool.worker_resources must be None, 'numa', 'auto' or one dict per worker "
                                  f"({self.workers}), got {wr!r}", parameter="pool.worker_resources", value=wr)
        if isinstance(self.hooks, dict):
            s("hooks", PoolHooks(**self.hooks))
        if not isinstance(self.hooks, PoolHooks):
            raise InvalidArgument(f"pool.hooks must be a PoolHooks or a mapping, got {self.hooks!r}",
                                  parameter="pool.hooks", value=self.hooks)

    # ---------------------------------------------------------------- derived
    @property
    def balancer_spec(self):
        """{kind, window, threshold} with the defaults filled in."""
        spec = {"kind": self.balancer} if isinstance(self.balancer, str) or self.balancer is None else dict(self.balancer)
        spec.setdefault("kind", "token-bucket")
        if spec["kind"] == "token-bucket":
            spec.setdefault("window", 64)
            spec.setdefault("threshold", 1.3)
        return spec

    def worker_resources_of(self, i):
        wr = self.worker_resources
        return dict(wr[i] or {}) if isinstance(wr, (list, tuple)) else {}

    def worker_numa_node_of(self, i):
        return None if self.worker_numa_nodes is None else self.worker_numa_nodes[i]

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


# the keyword arguments Pool(...) accepted before PoolConfig, mapped onto it
_LEGACY_HOOKS = ("worker_delay_s", "source_delay_s")


def config_from_kwargs(config=None, **kwargs):
    """Pool(path, config=None, **kwargs): a PoolConfig, with old-style keyword arguments folded in."""
    hooks = {k: kwargs.pop(k) for k in _LEGACY_HOOKS if k in kwargs}
    names = {f.name for f in dataclasses.fields(PoolConfig)}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise InvalidArgument(f"Pool: unknown option(s) {unknown}; expected {sorted(names | set(_LEGACY_HOOKS))}")
    if config is not None and not isinstance(config, PoolConfig):
        raise InvalidArgument(f"Pool: config must be a PoolConfig, got {type(config).__name__}")
    base = PoolConfig(**kwargs) if config is None else config.replace(**kwargs) if kwargs else config
    if hooks:
        base = base.replace(hooks=dataclasses.replace(base.hooks, **hooks))
    return base
