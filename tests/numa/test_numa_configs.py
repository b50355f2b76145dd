"""configs/pool-dual-socket.yaml and configs/numa-experiment.yaml load; experiment errors name file:line."""
import os

import pytest

from colibri_dist import config, numa
from colibri_dist.bench.numa import run as bench
from colibri_dist.bench.numa.config import load_experiment
from colibri_dist.errors import ConfigError

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "sysfs")


def test_dual_socket_pool_config_matches_the_two_socket_plan():
    cfg = config.load_service_config(os.path.join(ROOT, "configs", "pool-dual-socket.yaml"))
    nc = cfg.pool.numa
    assert nc.enabled and nc.mem_policy == "bind"
    plan = numa.plan(numa.topology(os.path.join(FIXTURES, "two-socket-smt")), nc.workers_per_node, nc.mem_policy)
    assert len(plan.workers) == cfg.pool.workers


def test_experiment_config_feeds_the_bench_parameters():
    path = os.path.join(ROOT, "configs", "numa-experiment.yaml")
    overrides, wpn = load_experiment(path)
    assert wpn == 1 and overrides["memory"] == ["default", "local", "remote", "interleave"]
    p = bench.params(bench._args(["--quick", "--config", path, "--buffer-mib", "8"]))
    assert p["buffer_bytes"] == 8 << 20 and p["hidden"] == 2048 and p["repeats"] == 5


@pytest.mark.parametrize("text,match", [
    ("numa_bench:\n  repeat: 3\n", r"x.yaml:2:3: numa_bench.repeat: unknown key"),
    ("numa_bench:\n  memory: [local, far]\n", r"x.yaml:2:19: numa_bench.memory: expected one of"),
    ("numa_bench:\n  buffer_bytes: lots\n", r"x.yaml:2:17: numa_bench.buffer_bytes: expected a byte size"),
    ("numa_bench:\n  expert: {hidden: 0}\n", r"numa_bench.expert.hidden: expected an integer >= 1"),
    ("numa_bnech: {}\n", r"x.yaml:1:1: numa_bnech: unknown key"),
    ("numa_bench:\n  repeats: 2\npool:\n  numa: {workers_per_node: 0}\n",
     r"x.yaml:4:28: pool.numa.workers_per_node: expected a positive integer"),
    ("pool:\n  numa: {workers_per_node: 2}\nnuma_bench: {repeats: 0}\n", r"x.yaml:3:23: numa_bench.repeats"),
])
def test_experiment_config_errors(tmp_path, text, match):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_experiment(str(path))
