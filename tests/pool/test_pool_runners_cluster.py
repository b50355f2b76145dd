"""Sequence runners on a multi-raylet Ray on loopback (ray.cluster_utils.Cluster): the node hosting a
runner (and so its routing and balancing) and an expert worker is removed mid-generation; the other
runner takes over the lost requests from their last committed token, the other worker serves every
expert, and every result is bit-identical to the LLM in process."""
import os
import sys
import threading
import time

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster

import colibri_dist as cd
from colibri_dist.generate import SamplingParams
from colibri_dist.pool.config import PoolConfig, PoolHooks
from colibri_dist.pool.runners import RunnerPool

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "model"))
pytestmark = pytest.mark.ray
torch = pytest.importorskip("torch")

_FAST_FAILURE_DETECTION = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                           "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=2, node_ip_address="127.0.0.1", include_dashboard=False, _system_config=_FAST_FAILURE_DETECTION))
    # two "machines", each with one runner slot and one expert-worker slot
    nodes = [c.add_node(num_cpus=1, node_ip_address="127.0.0.1", resources={f"m{i}": 2, "runner_numa_0": 1})
             for i in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, namespace="colibri", logging_level="WARNING")
    yield c, nodes
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    from model_cases import write_case
    src = tmp_path_factory.mktemp("hf-olmoe")
    write_case("olmoe", src)
    return cd.convert(src, tmp_path_factory.mktemp("cb") / "o.colibri", experts="int8", progress=False)


def test_by_default_one_runner_per_runner_numa_slot_of_the_cluster(cluster, model_path):
    c, nodes = cluster
    ps = [[5, 6, 7], [8, 9, 10, 11]]
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    with cd.LLM(model_path, threads=1) as llm:
        ref = [r.token_ids for r in llm.generate(ps, params)]
    with RunnerPool(model_path, workers=1, threads_per_worker=1, llm={"threads": 1}) as rp:
        assert len(rp.runners) == 2  # one runner_numa_0 slot on each "machine"
        assert sorted(i["node"] for i in rp.runner_info) == sorted(n.node_id for n in nodes)
        assert [r.token_ids for r in rp.generate(ps, params)] == ref  # (runs before a node is removed)


def test_removing_the_node_of_a_runner_and_a_worker_mid_generation_changes_no_bits(cluster, model_path):
    c, nodes = cluster
    ps = [np.random.default_rng(s).integers(0, 97, 4 + 3 * s).tolist() for s in range(6)]
    params = SamplingParams(max_tokens=10, temperature=0.8, ignore_eos=True, logprobs=1)
    llm_kw = dict(threads=1, max_num_seqs=4)
    with cd.LLM(model_path, **llm_kw) as llm:
        ref = llm.generate(ps, params)
    cfg = PoolConfig(workers=2, threads_per_worker=1, worker_resources=[{"m0": 1}, {"m1": 1}], micro_batch=8,
                     restart_timeout_s=10,
                     hooks=PoolHooks(runner_step_delay_s=0.25))
    with RunnerPool(model_path, cfg, runners=2, runner_resources=[{"m0": 1}, {"m1": 1}], llm=llm_kw) as rp:
        st = rp.stats()
        # the control plane (Router, owner of the workers) stays on the driver's node, never on a
        # node that may go: routing lives in the runners
        assert rp.pool._ready["router_node"] == c.head_node.node_id
        assert [w["node"] for w in st["workers"]] == [n.node_id for n in nodes]
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", rp.generate(ps, params)))
        t.start()
        time.sleep(2.0)
        assert t.is_alive()
        c.remove_node(nodes[1])  # runner 1, its ExpertClient (routing + balancer) and worker 1
        t.join(timeout=240)
        assert not t.is_alive()
        got = out["r"]
        assert [(g.token_ids, [lp.logprob for lp in g.logprobs]) for g in got] == \
               [(r.token_ids, [lp.logprob for lp in r.logprobs]) for r in ref]
        st = rp.stats()
        assert st["lost_runners"] == [1] and st["resumed_tokens"] > 0
        assert [w["alive"] for w in st["workers"]] == [True, False]

