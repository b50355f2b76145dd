"""Ray worker pool (the only room that imports ray): Router actor, ExpertWorker actors, Pool facade.

    with Pool(path, workers=2) as pool:      # same bits as Engine(path).moe_forward
        y = pool.moe_forward(layer, x)
    pool = Pool.attach("svc")                 # join a named pool from another process

Ray is imported lazily, so pool.dispatch stays importable without starting it.
"""

__all__ = ["Pool", "NAMESPACE"]


def __getattr__(name):
    if name == "Pool":
        from .facade import Pool
        return Pool
    if name == "NAMESPACE":
        from .ray_setup import NAMESPACE
        return NAMESPACE
    raise AttributeError(f"module 'colibri_dist.pool' has no attribute {name!r}")
