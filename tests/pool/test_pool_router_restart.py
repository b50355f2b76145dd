"""The Router is no single point of failure (issue 21): killing it leaves the workers running and
the caller-routed data path untouched, Ray restarts it from the pool's recorded state (same worker
handles, hot-added experts from the manifest), calls give the same bits afterwards, and a Router
that stays dead is reported as a Router death, not as "all workers are down". One Ray per module."""
import os
import signal
import time

import numpy as np
import pytest
import ray

import colibri_dist as cd
from colibri_dist.errors import PoolError
from colibri_dist.pool import Pool
from colibri_dist.pool.config import PoolConfig

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_address():
    from colibri_dist.testing.pytest_ray import connect_local
    connect_local(num_cpus=2)           # retried under load
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def mixtral_src(tmp_path_factory):
    from colibri_dist.format.tiny import write_tiny
    src = tmp_path_factory.mktemp("hf") / "mixtral"
    write_tiny("mixtral", str(src))
    return src


@pytest.fixture
def fresh_model(mixtral_src, tmp_path):
    """A private copy (hot-add persists experts beside the file)."""
    return lambda fam: cd.convert(mixtral_src, tmp_path / f"{fam}.colibri", experts="int8", progress=False)


def _kill_router(pool):
    pid = pool._ready["router_pid"]
    os.kill(pid, signal.SIGKILL)
    return pid


def _expert(seed, hidden=32, inter=16):
    rng = np.random.default_rng(seed)
    w = {"gate": rng.standard_normal((inter, hidden)), "up": rng.standard_normal((inter, hidden)),
         "down": rng.standard_normal((hidden, inter))}
    return {k: (0.1 * v).astype(np.float32) for k, v in w.items()}, rng.standard_normal(hidden).astype(np.float32)


@pytest.mark.parametrize("routing_at", ["caller", "router"])
def test_router_kill_keeps_workers_and_bits(ray_address, fresh_model, routing_at):
    path = fresh_model("mixtral")
    layer = cd.open_model(path).moe_layers[-1]
    x = np.random.default_rng(1).standard_normal((9, 32)).astype(np.float32)
    with Pool(path, PoolConfig(workers=2, threads_per_worker=1, routing_at=routing_at)) as pool:
        y0 = pool.moe_forward(layer, x)
        workers = pool.worker_pids()
        old = _kill_router(pool)
        assert np.array_equal(pool.moe_forward(layer, x), y0)          # router mode: retried after the restart
        assert pool._call("ready")["router_pid"] != old and pool.worker_pids() == workers
        weights, row = _expert(3)
        new_id = pool.add_expert(layer, weights, row)                  # the restarted control plane works
        with cd.MoeExecutor(path, threads=1) as eng:
            want = eng.moe_forward(layer, x)
        assert new_id == 8 and np.array_equal(pool.moe_forward(layer, x), want)
        assert len(pool.stats()["workers"]) == 2                       # stats through the restarted Router


def test_router_that_stays_dead_is_reported_as_such(ray_address, fresh_model):
    path = fresh_model("mixtral")
    with Pool(path, PoolConfig(workers=1, threads_per_worker=1, max_restarts=0, restart_timeout_s=5)) as pool:
        _kill_router(pool)
        t0 = time.monotonic()
        with pytest.raises(PoolError, match=r"the pool's Router actor died during stats\(\)") as info:
            pool.stats()
        assert "workers are down" not in str(info.value) and time.monotonic() - t0 < 60
