"""Ray worker pool (the only room that imports ray): ExpertWorker actors, per-caller routing
(ExpertClient), the Router control plane, sequence runners, and their facades.

    with Pool(path, workers=2) as pool:      # same bits as MoeExecutor(path).moe_forward
        y = pool.moe_forward(layer, x)
    pool = Pool.attach("svc")                 # join a named pool from another process
    with RunnerPool(path, PoolConfig(workers=2), runners=2) as rp:
        outs = rp.generate(prompts, params)   # same bits as LLM(path).generate

Ray is imported lazily, so pool.dispatch stays importable without starting it.

RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER defaults to "0" here, BEFORE anything imports
ray (Ray reads it at import): Ray then resolves "this node" and 127.0.0.1
addresses to loopback instead of the machine's LAN address. A driver joining a
multi-machine cluster exports RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 (docs/CLUSTER.md).
"""
import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

__all__ = ["Pool", "PoolConfig", "PoolHooks", "RunnerPool", "NAMESPACE"]


def __getattr__(name):
    if name == "Pool":
        from .facade import Pool
        return Pool
    if name in ("PoolConfig", "PoolHooks"):
        from . import config
        return getattr(config, name)
    if name == "RunnerPool":
        from .runners import RunnerPool
        return RunnerPool
    if name == "NAMESPACE":
        from .ray_setup import NAMESPACE
        return NAMESPACE
    raise AttributeError(f"module 'colibri_dist.pool' has no attribute {name!r}")
