"""NUMA bench: placements on fixture machines, and one tiny end-to-end run on this machine."""
import json
import os
import sys

import pytest

from colibri_dist import numa
from colibri_dist.bench.numa import run as bench
from colibri_dist.cli import main

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "sysfs")


def test_placements_on_two_socket_and_snc():
    topo = numa.topology(os.path.join(FIXTURES, "two-socket-smt"))
    w0, w1 = numa.plan(topo).workers
    assert bench.placement(topo, w0, "local") == ("bind", (0,))
    assert bench.placement(topo, w0, "remote") == ("bind", (1,))
    assert bench.placement(topo, w1, "remote") == ("bind", (0,))
    assert bench.placement(topo, w1, "interleave") == ("interleave", (0, 1))
    assert bench.placement(topo, w0, "default") == ("none", ())
    snc = numa.topology(os.path.join(FIXTURES, "four-node-snc"))
    workers = numa.plan(snc).workers
    assert bench.placement(snc, workers[0], "remote") == ("bind", (2,))  # farthest: the other socket
    assert bench.placement(snc, workers[3], "remote") == ("bind", (0,))


def test_placements_on_one_node_say_what_needs_two():
    topo = numa.topology(os.path.join(FIXTURES, "single-node-smt"))
    w = numa.plan(topo).workers[0]
    for memory in ("remote", "interleave"):
        policy, reason = bench.placement(topo, w, memory)
        assert policy is None and "needs two NUMA nodes" in reason


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux affinity")
def test_bench_end_to_end_writes_documented_json(tmp_path, capsys):
    path = tmp_path / "numa.json"
    rc = main(["numa", "bench", "--quick", "--json", str(path)])
    out = capsys.readouterr().out
    assert rc == 0 and "read GiB/s" in out and "baseline: memory=default" in out
    d = json.loads(path.read_text())
    assert d["bench"] == "numa" and d["baseline"] == {"memory": "default", "threads": "unpinned"}
    n_workers = len(d["plan"])
    assert len(d["rows"]) == n_workers * len(bench.MEMORY) * len(bench.THREADS)
    for row in d["rows"]:
        assert {"worker", "node", "memory", "threads", "cpus", "mem_policy", "mem_nodes", "status"} <= set(row)
        if row["status"] == "ok":
            assert row["read_gib_s"] > 0 and row["read_ratio"] > 0
            assert sum(row["buffer_pages_per_node"].values()) > 0
            if row["mem_policy"] == "bind":
                assert set(row["buffer_pages_per_node"]) == {str(n) for n in row["mem_nodes"]}
                assert row["buffer_policy"] == "bind:" + ",".join(map(str, row["mem_nodes"]))
        else:
            assert row["status"] == "skipped" and row["reason"]
    base = [r for r in d["rows"] if r["memory"] == "default" and r["threads"] == "unpinned"]
    assert all(r["read_ratio"] == 1.0 for r in base)
    if len(d["topology"]["nodes"]) == 1:
        assert {r["memory"] for r in d["rows"] if r["status"] == "skipped"} == {"remote", "interleave"}
        assert len(d["skipped"]) == 4 * n_workers
