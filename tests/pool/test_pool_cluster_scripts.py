"""cluster/*.sh without Ray: numa_<i> resources from sysfs copies, and the exact `ray start` commands."""
import json
import os
import shlex
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSFS = os.path.join(ROOT, "tests", "fixtures", "sysfs")


def _run(script, *args, **env):
    full_env = dict(os.environ, **env)
    return subprocess.run([os.path.join(ROOT, "cluster", script), *args], capture_output=True, text=True,
                          env=full_env, timeout=30)


@pytest.mark.parametrize("tree,per_node,expected", [
    ("two-socket-smt", "1", {"numa_0": 1, "numa_1": 1}),
    ("four-node-snc", "2", {"numa_0": 2, "numa_1": 2, "numa_2": 2, "numa_3": 2}),
    ("memory-only-node", "1", {"numa_0": 1, "numa_1": 1}),  # node 2 has memory but no CPU: no slot
    ("single-node-smt", "1", {"numa_0": 1}),
])
def test_numa_resources_one_per_cpu_node(tree, per_node, expected):
    out = _run("numa-resources.sh", SYSFS_ROOT=os.path.join(SYSFS, tree), WORKERS_PER_NODE=per_node)
    assert out.returncode == 0, out.stderr
    runners = {f"runner_{k}": 1 for k in expected}  # one sequence-runner slot per node by default
    assert json.loads(out.stdout) == dict(expected, **runners)
    none = _run("numa-resources.sh", SYSFS_ROOT=os.path.join(SYSFS, tree), WORKERS_PER_NODE=per_node,
                RUNNERS_PER_NODE="0")
    assert json.loads(none.stdout) == expected


def test_numa_resources_without_numa_info_is_one_slot_and_rejects_bad_counts(tmp_path):
    out = _run("numa-resources.sh", SYSFS_ROOT=str(tmp_path), RUNNERS_PER_NODE="2")
    assert json.loads(out.stdout) == {"numa_0": 1, "runner_numa_0": 2}
    bad = _run("numa-resources.sh", WORKERS_PER_NODE="two")
    assert bad.returncode == 2 and "WORKERS_PER_NODE" in bad.stderr
    bad = _run("numa-resources.sh", RUNNERS_PER_NODE="-1")
    assert bad.returncode == 2 and "RUNNERS_PER_NODE" in bad.stderr


def test_start_scripts_build_ray_start_with_node_ip_and_numa_resources():
    sysfs = os.path.join(SYSFS, "two-socket-smt")
    head = _run("start-head.sh", "10.1.2.3", "6380", DRY_RUN="1", SYSFS_ROOT=sysfs)
    assert head.returncode == 0, head.stderr
    argv = shlex.split(head.stdout)
    assert argv[:3] == ["ray", "start", "--head"]
    assert argv[argv.index("--node-ip-address") + 1] == "10.1.2.3"
    assert argv[argv.index("--port") + 1] == "6380"
    assert json.loads(argv[argv.index("--resources") + 1]) == {"numa_0": 1, "numa_1": 1, "runner_numa_0": 1,
                                                               "runner_numa_1": 1}
    worker = _run("start-worker.sh", DRY_RUN="1", SYSFS_ROOT=sysfs, NODE_IP="10.1.2.4",
                  RAY_HEAD_ADDRESS="10.1.2.3:6380")
    argv = shlex.split(worker.stdout)
    assert argv[argv.index("--address") + 1] == "10.1.2.3:6380"
    assert argv[argv.index("--node-ip-address") + 1] == "10.1.2.4"
    for script in ("start-head.sh", "start-worker.sh"):
        missing = _run(script, DRY_RUN="1", NODE_IP="", RAY_HEAD_ADDRESS="")
        assert missing.returncode == 2 and "usage" in missing.stderr
