"""PoolConfig (no Ray): one validated object, bad options named, hooks in one field, legacy kwargs folded in."""
import pickle

import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.pool.config import PoolConfig, PoolHooks, config_from_kwargs


def test_defaults_validate_and_pickle_whole():
    cfg = PoolConfig(workers=3, balancer={"kind": "token-bucket", "threshold": 1.5}, hooks={"worker_delay_s": 0.1})
    assert cfg.hooks == PoolHooks(worker_delay_s=0.1)
    assert cfg.balancer_spec == {"kind": "token-bucket", "threshold": 1.5, "window": 64}
    assert PoolConfig().balancer_spec["threshold"] == 1.3
    assert pickle.loads(pickle.dumps(cfg)) == cfg


@pytest.mark.parametrize("kw, word", [
    (dict(workers=0), "pool.workers"), (dict(workers=True), "pool.workers"),
    (dict(replicas=-1), "pool.replicas"), (dict(micro_batch=0), "micro_batch"),
    (dict(balancer="fast"), "balancer"), (dict(balancer={"kind": "home", "speed": 1}), "unknown key"),
    (dict(routing_policy="fastest"), "routing.policy"), (dict(policy="mru"), "pool.policy"),
    (dict(routing_at="gcs"), "routing_at"),
    (dict(compression="lz4"), "compression"), (dict(worker_resources="gpu"), "worker_resources"),
    (dict(worker_resources=[{}], workers=2), "worker_resources"), (dict(hooks={"worker_delay_s": -1}), "hooks"),
    (dict(hooks={"nap": 1}), "nap"),
])
def test_bad_options_are_refused_with_the_option_named(kw, word):
    with pytest.raises((InvalidArgument, TypeError), match=word):
        PoolConfig(**kw)


def test_legacy_keywords_land_in_hooks_and_unknown_ones_are_named():
    cfg = config_from_kwargs(workers=2, worker_delay_s=0.2, source_delay_s=0.01)
    assert cfg.hooks == PoolHooks(worker_delay_s=0.2, source_delay_s=0.01)
    base = PoolConfig(workers=4)
    assert config_from_kwargs(base, replicas=2) == base.replace(replicas=2)
    assert config_from_kwargs(base) is base
    with pytest.raises(InvalidArgument, match="warp"):
        config_from_kwargs(warp=9)
    with pytest.raises(InvalidArgument, match="config must be a PoolConfig"):
        config_from_kwargs({"workers": 2})


def test_from_yaml_section():
    from colibri_dist.config import PoolSection as Section
    from colibri_dist.config import RoutingConfig, ServiceConfig
    from colibri_dist.config.engine_args import of_service
    for comp, want in (("none", None), ("zstd", "zstd")):
        svc = ServiceConfig(model="m.colibri", pool=Section(workers=3, offload_compression=comp),
                            routing=RoutingConfig(policy="balanced"))
        cfg = PoolConfig(**of_service(svc).pool_kwargs())
        assert (cfg.workers, cfg.compression, cfg.routing_policy) == (3, want, "balanced")
        assert cfg.balancer_spec["kind"] == "token-bucket"
