"""numa.plan: per-worker CPU sets and memory policies on fixture machines."""
import itertools
import json
import os

import pytest

from colibri_dist import numa
from colibri_dist.errors import InvalidArgument

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "sysfs")
ALL_FIXTURES = ["two-socket-smt", "four-node-snc", "memory-only-node", "cpu-only-node", "single-node-smt"]


def fixture(name):
    return numa.topology(os.path.join(FIXTURES, name))


def test_two_socket_default_one_worker_per_socket_cores_first():
    p = numa.plan(fixture("two-socket-smt"))
    assert [(w.index, w.node, w.mem_policy, w.mem_nodes) for w in p.workers] == [(0, 0, "bind", (0,)), (1, 1, "bind", (1,))]
    assert p.workers[0].cpus == tuple(range(0, 8)) + tuple(range(16, 24))  # 8 primaries, then siblings
    assert p.workers[1].cpus == tuple(range(8, 16)) + tuple(range(24, 31))
    assert [w.physical_cores for w in p.workers] == [8, 8]
    assert all(w.n_workers == 2 and w.n_mem_nodes == 2 for w in p.workers)


def test_two_socket_two_workers_per_node_split_whole_cores():
    p = numa.plan(fixture("two-socket-smt"), workers_per_node=2)
    assert [w.cpus for w in p.workers] == [(0, 1, 2, 3, 16, 17, 18, 19), (4, 5, 6, 7, 20, 21, 22, 23),
                                           (8, 9, 10, 11, 24, 25, 26, 27), (12, 13, 14, 15, 28, 29, 30)]
    assert [w.node for w in p.workers] == [0, 0, 1, 1]


def test_snc_four_nodes_bind_local_interleave_all():
    topo = fixture("four-node-snc")
    bind = numa.plan(topo)
    assert [(w.node, w.mem_nodes) for w in bind.workers] == [(k, (k,)) for k in range(4)]
    assert bind.workers[2].cpus == (8, 9, 10, 11, 24, 25, 26, 27)
    inter = numa.plan(topo, mem_policy="interleave")
    assert all(w.mem_nodes == (0, 1, 2, 3) for w in inter.workers)
    assert all(w.mem_nodes == () for w in numa.plan(topo, mem_policy="none").workers)


def test_memory_only_node_gets_no_worker_but_joins_interleave():
    topo = fixture("memory-only-node")
    p = numa.plan(topo, workers_per_node=2)
    assert sorted({w.node for w in p.workers}) == [0, 1]
    assert [w.cpus for w in p.workers] == [(0, 1), (2, 3), (4, 5), (6,)]
    assert all(w.mem_nodes == (w.node,) for w in p.workers)
    assert all(w.mem_nodes == (0, 1, 2) for w in numa.plan(topo, mem_policy="interleave").workers)


def test_cpu_only_node_binds_to_nearest_memory():
    p = numa.plan(fixture("cpu-only-node"))
    assert [(w.node, w.mem_nodes) for w in p.workers] == [(0, (0,)), (1, (2,))]


def test_more_workers_than_cores_splits_smt_threads():
    topo = fixture("single-node-smt")
    assert [w.cpus for w in numa.plan(topo, workers_per_node=4).workers] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [w.cpus for w in numa.plan(topo, workers_per_node=2).workers] == [(0, 2, 1, 3), (4, 6, 5, 7)]
    six = [w.cpus for w in numa.plan(topo, workers_per_node=6).workers]
    assert six == [(0, 1), (2, 3), (4,), (5,), (6,), (7,)]
    with pytest.raises(InvalidArgument, match="node 0 has 8 online CPUs"):
        numa.plan(topo, workers_per_node=9)


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_worker_cpus_partition_each_node_and_never_split_a_core_needlessly(name):
    topo = fixture(name)
    for wpn in range(1, 5):
        try:
            p = numa.plan(topo, workers_per_node=wpn)
        except InvalidArgument:
            assert any(len(n.cpus) < wpn for n in topo.cpu_nodes)
            continue
        for node in topo.cpu_nodes:
            sets = [set(w.cpus) for w in p.workers if w.node == node.id]
            assert len(sets) == wpn
            assert all(a.isdisjoint(b) for a, b in itertools.combinations(sets, 2))
            assert set().union(*sets) == set(node.cpus)
            if wpn <= len(topo.cores(node.cpus)):
                for core in topo.cores(node.cpus):
                    assert sum(1 for s in sets if s & set(core)) == 1, (name, wpn, core)


def test_bad_arguments():
    topo = fixture("two-socket-smt")
    with pytest.raises(InvalidArgument, match="mem_policy 'local'"):
        numa.plan(topo, mem_policy="local")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidArgument, match="workers_per_node"):
            numa.plan(topo, workers_per_node=bad)


def test_plan_json_schema():
    d = json.loads(json.dumps(numa.plan(fixture("memory-only-node")).to_dict()))
    assert [n["id"] for n in d["nodes"]] == [0, 1, 2]
    assert d["nodes"][2] == {"id": 2, "cpus": [], "mem_bytes": 128 * 2**30}
    assert d["distances"] == [[10, 21, 14], [21, 10, 24], [14, 24, 10]]
    assert d["workers"][1] == {"index": 1, "node": 1, "cpus": [4, 5, 6], "cpulist": "4-6",
                               "physical_cores": 3, "mem_policy": "bind", "mem_nodes": [1]}
    assert d["offline_cpus"] == [7]


def test_preferred_names_one_node():
    assert [(w.node, w.mem_nodes) for w in numa.plan(fixture("cpu-only-node"), mem_policy="preferred").workers] \
        == [(0, (0,)), (1, (2,))]
    assert all(w.mem_nodes == (w.node,) for w in numa.plan(fixture("four-node-snc"), mem_policy="preferred").workers)
