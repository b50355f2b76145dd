"""numa.topology: sysfs parsing on fixture trees, malformed trees, fallbacks, and this machine."""
import os
import sys

import pytest
from hypothesis import given, strategies as st

from colibri_dist import numa
from colibri_dist.errors import ConfigError, InvalidArgument

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "sysfs")
GIB = 2**30


def fixture(name):
    return numa.topology(os.path.join(FIXTURES, name))


def test_two_socket_smt_drops_offline_cpu_listed_in_node():
    topo = fixture("two-socket-smt")
    assert [n.id for n in topo.nodes] == [0, 1]
    assert topo.nodes[0].cpus == tuple(range(0, 8)) + tuple(range(16, 24))
    assert topo.nodes[1].cpus == tuple(range(8, 16)) + tuple(range(24, 31))  # 31 offline, though listed
    assert topo.offline_cpus == (31,)
    assert [n.mem_bytes for n in topo.nodes] == [64 * GIB, 64 * GIB]
    assert topo.distances == ((10, 21), (21, 10))
    assert topo.siblings[0] == (0, 16) and topo.siblings[16] == (0, 16)
    assert topo.siblings[15] == (15,)  # its sibling 31 is offline
    assert len(topo.cores(topo.nodes[1].cpus)) == 8


def test_four_node_sub_numa_clustering():
    topo = fixture("four-node-snc")
    assert [n.cpus for n in topo.nodes] == [tuple(range(4 * k, 4 * k + 4)) + tuple(range(16 + 4 * k, 20 + 4 * k))
                                            for k in range(4)]
    assert topo.distance(0, 1) == 12 and topo.distance(0, 2) == 21 and topo.distance(3, 2) == 12
    assert all(topo.distances[i][i] == 10 for i in range(4))


def test_memory_only_node_and_offline_cpu_from_cpu_online_file():
    topo = fixture("memory-only-node")
    assert topo.node(2).cpus == () and topo.node(2).mem_bytes == 128 * GIB
    assert [n.id for n in topo.cpu_nodes] == [0, 1]
    assert [n.id for n in topo.memory_nodes] == [0, 1, 2]
    assert topo.offline_cpus == (7,)
    assert topo.node(1).cpus == (4, 5, 6)


def test_adjacent_sibling_numbering():
    topo = fixture("single-node-smt")
    assert topo.cores(topo.nodes[0].cpus) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert topo.to_dict()["smt_groups"] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def _mini_tree(root, cpulist="0-1", distance="10", meminfo="Node 0 MemTotal: 1024 kB\n"):
    node = root / "devices" / "system" / "node" / "node0"
    cpu = root / "devices" / "system" / "cpu"
    node.mkdir(parents=True)
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-1\n")
    (node / "cpulist").write_text(cpulist + "\n")
    (node / "distance").write_text(distance + "\n")
    (node / "meminfo").write_text(meminfo)
    return root


def test_malformed_cpulist_names_the_file(tmp_path):
    _mini_tree(tmp_path, cpulist="0-x")
    with pytest.raises(ConfigError, match=r"node0/cpulist: '0-x'"):
        numa.topology(tmp_path)


def test_distance_row_of_wrong_length_names_the_file(tmp_path):
    _mini_tree(tmp_path, distance="10 20")
    with pytest.raises(ConfigError, match=r"node0/distance: 2 distances for 1 nodes"):
        numa.topology(tmp_path)


def test_meminfo_without_memtotal_names_the_file(tmp_path):
    _mini_tree(tmp_path, meminfo="garbage\n")
    with pytest.raises(ConfigError, match=r"node0/meminfo"):
        numa.topology(tmp_path)


def test_missing_root_is_an_invalid_argument(tmp_path):
    with pytest.raises(InvalidArgument, match="no devices/system"):
        numa.topology(tmp_path / "absent")


def test_root_may_be_a_copy_of_slash(tmp_path):
    _mini_tree(tmp_path / "sys")
    assert numa.topology(tmp_path).nodes[0].cpus == (0, 1)


def test_kernel_without_numa_gives_one_node_of_online_cpus(tmp_path):
    cpu = tmp_path / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-2,5\n")
    topo = numa.topology(tmp_path)
    assert topo.source == "fallback"
    assert len(topo.nodes) == 1 and topo.nodes[0].cpus == (0, 1, 2, 5)


def test_non_linux_host_is_one_node_with_every_cpu(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    topo = numa.topology()
    assert topo.source == "fallback"
    assert topo.nodes[0].cpus == tuple(range(os.cpu_count()))
    assert topo.distances == ((10,),)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /sys")
def test_this_machine_matches_the_kernel():
    topo = numa.topology()
    online = numa.parse_cpulist(open("/sys/devices/system/cpu/online").read())
    assert sorted(c for n in topo.nodes for c in n.cpus) == online
    assert len(topo.distances) == len(topo.nodes)
    assert all(topo.distances[i][i] == 10 for i in range(len(topo.nodes)))


@given(st.sets(st.integers(0, 300), max_size=40))
def test_cpulist_format_parse_roundtrip(cpus):
    assert numa.parse_cpulist(numa.format_cpulist(cpus)) == sorted(cpus)


def test_parse_cpulist_kernel_forms():
    assert numa.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert numa.parse_cpulist("") == []
    assert numa.parse_cpulist("0-7:2") == [0, 2, 4, 6]
    with pytest.raises(ConfigError):
        numa.parse_cpulist("5-3")
