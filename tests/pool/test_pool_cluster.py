"""Pool on a multi-raylet Ray cluster on one machine (all loopback): workers placed per node by
the numa_<i> custom resources, a node removed in the middle of a batch, and the node coming back."""
import threading
import time

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster

import colibri_dist as cd
from colibri_dist.pool import Pool

pytestmark = pytest.mark.ray

_FAST_FAILURE_DETECTION = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                           "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=2, node_ip_address="127.0.0.1", include_dashboard=False,
        _system_config=_FAST_FAILURE_DETECTION))
    # two "machines", one socket each: a numa_0 slot per raylet (what cluster/start-*.sh register)
    nodes = [c.add_node(num_cpus=1, node_ip_address="127.0.0.1", resources={"numa_0": 1}) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, namespace="colibri", logging_level="WARNING")
    yield c, nodes
    ray.shutdown()
    c.shutdown()


def _x(n, seed):
    return np.random.default_rng(seed).standard_normal((n, 32)).astype(np.float32)


def test_workers_land_one_per_raylet_by_numa_resource_and_match_the_engine(cluster, tiny_models):
    c, nodes = cluster
    path = tiny_models["qwen2_moe"]
    layer = cd.open_model(path).moe_layers[-1]
    x = _x(40, 3)
    with cd.MoeExecutor(path, threads=1) as eng:
        y_ref = eng.moe_forward(layer, x)
    with Pool(path, workers=2, threads_per_worker=1, worker_resources="numa", micro_batch=8) as pool:
        st = pool.stats()
        placed = {w["node"] for w in st["workers"]}
        assert placed == {n.node_id for n in nodes}  # one worker on each non-head raylet
        assert np.array_equal(pool.moe_forward(layer, x), y_ref)


def test_removing_a_node_mid_batch_is_survived_bit_identically(cluster, tiny_models):
    c, nodes = cluster
    path = tiny_models["mixtral"]
    layer = cd.open_model(path).moe_layers[-1]
    n, k = 96, 2
    x = _x(n, 5)
    with cd.MoeExecutor(path, threads=1) as eng:
        y_ref = eng.moe_forward(layer, x)
    with Pool(path, workers=2, threads_per_worker=1, worker_resources="numa", micro_batch=8,
              worker_delay_s=0.15) as pool:
        st = pool.stats()
        doomed = next(node for node in nodes if node.node_id == st["workers"][1]["node"])
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("y", pool.moe_forward(layer, x)))
        t.start()
        time.sleep(0.6)
        assert t.is_alive()
        c.remove_node(doomed)
        t.join(timeout=120)
        assert np.array_equal(out["y"], y_ref)
        st = pool.stats()
        assert st["retries"] >= 1
        assert sum(w["tokens"] for w in st["workers"]) == n * k
        assert [w["alive"] for w in st["workers"]] == [True, False]  # its numa_0 slot is gone with the node
        assert np.array_equal(pool.moe_forward(layer, x), y_ref)  # the survivor serves every expert
        # the machine comes back: Ray restarts the lost worker on it, the pool takes it back
        back = c.add_node(num_cpus=1, node_ip_address="127.0.0.1", resources={"numa_0": 1})
        deadline = time.time() + 90
        while time.time() < deadline and not all(w["alive"] for w in pool.stats()["workers"]):
            time.sleep(0.5)
        st = pool.stats()
        assert [w["alive"] for w in st["workers"]] == [True, True]
        assert st["workers"][1]["node"] == back.node_id
        before = st["workers"][1]["tokens"]
        assert np.array_equal(pool.moe_forward(layer, x), y_ref)
        assert pool.stats()["workers"][1]["tokens"] > before  # it takes work again
