"""The stress config file: `model`, `pool`, `routing`, `demo` (shared schema) plus `stress:`.

Role in the data flow: `colibri stress CONFIG` -> `load_stress_config(path)` ->
StressConfig, or a ConfigError naming file:line:column and the key path. The
shared sections are validated by colibri_dist.config (same rules as jobs and the
pool service); this module only adds the schema of the `stress:` section.
"""
import os
from dataclasses import dataclass, field
from typing import Optional

from .. import config as C
from ..errors import ConfigError


@dataclass
class EventSpec:
    """A recurring event: first at `first_s`, then every `every_s` (0 = once)."""
    enabled: bool = True
    first_s: float = 1.0
    every_s: float = 0.0
    duration_s: float = 0.0


@dataclass
class FaultsSection:
    corrupt_spill: Optional[EventSpec] = None
    enospc: Optional[EventSpec] = None
    slow_source: Optional[EventSpec] = None
    kill_worker: Optional[EventSpec] = None
    remove_node: Optional[EventSpec] = None
    truncate_segment: Optional[EventSpec] = None


@dataclass
class ClusterSection:
    nodes: int = 1                  # 1 = one local Ray; >1 = that many raylets (ray.cluster_utils.Cluster)
    cpus_per_node: int = 2


@dataclass
class StressSection:
    workload: str = C.one_of("moe", "generation", default="moe")   # MoE-layer batches | whole-model requests
    duration_s: float = 60.0
    max_batches: Optional[int] = None
    streams: int = 3
    batch_tokens: int = 64
    zipf_s: float = 1.1
    shift_every: int = 20           # batches of a stream between hot-set shifts
    noise: float = 0.25
    seed: int = 0
    cache_fraction: float = 0.05    # total RAM budget over all workers / expert bytes (pool.cache_bytes null)
    offload_fs: str = C.one_of("auto", "loop", "tmpfs", "dir", default="auto")
    offload_fs_bytes: C.Size = 256 * 1024 ** 2
    slow_source_ms: float = 20.0
    rss_period_s: float = 0.5
    rss_slack: C.Size = 32 * 1024 ** 2
    worker_max_restarts: int = -1   # Ray actor restarts per worker (-1 = unlimited: kills keep coming)
    hot_add: Optional[EventSpec] = None
    hot_remove: Optional[EventSpec] = None
    requests_per_wave: int = 16     # generation: requests per llm.generate call (continuous batching)
    max_tokens: int = 12            # generation: tokens per request at most
    faults: FaultsSection = field(default_factory=FaultsSection)
    cluster: ClusterSection = field(default_factory=ClusterSection)


@dataclass
class StressConfig:
    model: Optional[str] = None
    pool: C.PoolSection = field(default_factory=C.PoolSection)
    routing: C.RoutingConfig = field(default_factory=C.RoutingConfig)
    demo: C.DemoConfig = field(default_factory=C.DemoConfig)
    demo_llm: C.DemoLLMConfig = field(default_factory=C.DemoLLMConfig)
    stress: StressSection = field(default_factory=StressSection)
    source: Optional[str] = field(default=None, metadata={"internal": True})


def default_config_path(workload="moe"):
    """configs/offload-stress.yaml (or generation-stress.yaml) shipped inside the package."""
    name = "generation-stress.yaml" if workload == "generation" else "offload-stress.yaml"
    return os.path.join(os.path.dirname(__file__), "..", "configs", name)


def load_stress_config(path=None, text=None):
    """Load and validate a stress config (default: the packaged offload-stress.yaml)."""
    source = os.path.normpath(os.fspath(path or default_config_path()))
    return C.load_sections(StressConfig, source, text, _validate_all,
                           resolve=[("demo", ["cache_dir"]), ("demo_llm", ["cache_dir"])])


def _validate_all(cfg, at):
    C.validate_pool(cfg.pool, at)
    _validate_stress(cfg, at)


def _validate_stress(cfg, at):
    s = cfg.stress
    C.check_positive(s, ["streams", "batch_tokens", "shift_every", "max_batches", "requests_per_wave",
                          "max_tokens"], at, "stress")
    C.check_positive(s.cluster, ["nodes", "cpus_per_node"], at, "stress.cluster")
    for name in ("duration_s", "rss_period_s"):
        if getattr(s, name) <= 0:
            C.fail(at(f"stress.{name}"), f"stress.{name}", f"expected a positive number, got {getattr(s, name)}")
    if not 0 < s.cache_fraction <= 1:
        C.fail(at("stress.cache_fraction"), "stress.cache_fraction",
                f"expected a number in (0, 1], got {s.cache_fraction}")
    for name in ("zipf_s", "noise", "slow_source_ms"):
        if getattr(s, name) < 0:
            C.fail(at(f"stress.{name}"), f"stress.{name}", f"expected a number >= 0, got {getattr(s, name)}")
    for path, spec in _event_specs(s):
        for name in ("first_s", "every_s", "duration_s"):
            if getattr(spec, name) < 0:
                C.fail(at(f"{path}.{name}"), f"{path}.{name}", f"expected seconds >= 0, got {getattr(spec, name)}")
    if s.faults.remove_node and s.faults.remove_node.enabled and s.cluster.nodes < cfg.pool.workers + 2:
        C.fail(at("stress.faults.remove_node"), "stress.faults.remove_node",
                f"needs stress.cluster.nodes >= pool.workers + 2 = {cfg.pool.workers + 2} (a head raylet, "
                "one raylet per worker and a spare the removed node's worker can restart on)")
    if cfg.pool.workers < 1:
        C.fail(at("pool.workers"), "pool.workers", "the stress run drives a Ray pool: expected >= 1")


def _event_specs(s):
    for name in ("hot_add", "hot_remove"):
        if getattr(s, name) is not None:
            yield f"stress.{name}", getattr(s, name)
    for name in FaultsSection.__dataclass_fields__:
        if getattr(s.faults, name) is not None:
            yield f"stress.faults.{name}", getattr(s.faults, name)


def enabled_events(s):
    """[(kind, EventSpec)] of every enabled fault and expert-table event of a StressSection."""
    out = []
    for path, spec in _event_specs(s):
        if spec.enabled:
            out.append((path.rsplit(".", 1)[1], spec))
    return out


def as_plain(cfg):
    """StressConfig -> dict for the report."""
    return C.as_dict(cfg)


__all__ = ["StressConfig", "StressSection", "load_stress_config", "ConfigError", "enabled_events"]
