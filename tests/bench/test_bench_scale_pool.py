"""The pool stage of `colibri bench scale` (issue 29 item 4) with real memory cgroups (root, cgroup v1): a process
moved into a group is charged there for what it faults in and is given back at the end; on the toy shape the whole
stage runs end to end over 2 expert workers, each in its own group: the pool's greedy tokens equal the in-process
engine's, each worker sat in its group, reads per token are recorded, and the groups are gone afterwards. One
loopback Ray for the module (the stage's Pool joins it)."""
import json
import os
import subprocess
import sys

import pytest

from colibri_dist.bench.scale import limits, pool_groups, run

WHY = limits.available()
pytestmark = [pytest.mark.ray,
              pytest.mark.skipif(WHY is not None, reason=f"the pool stage needs memory cgroups: {WHY}")]


@pytest.fixture(scope="module")
def local_ray():
    """One loopback Ray for the module, started as colibri starts its own (127.0.0.1, token auth)."""
    import ray
    from colibri_dist.testing.pytest_ray import connect_local
    try:
        connect_local()                 # retried under load
    except Exception as exc:
        pytest.fail(f"could not start the module's loopback Ray: {type(exc).__name__}: {exc}")
    yield ray
    ray.shutdown()


@pytest.fixture
def live_ray(local_ray):
    """The module's Ray, checked before each test: a dead one fails the test saying so."""
    try:
        alive = [n for n in local_ray.nodes() if n["Alive"]]
    except Exception as exc:
        alive, why = [], f"{type(exc).__name__}: {exc}"
    else:
        why = "no live node"
    if not local_ray.is_initialized() or not alive:
        pytest.fail(f"the module's loopback Ray is dead ({why}); the tests of this module need it")
    return local_ray


TOUCH = ("import mmap, sys\n"
         "f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
         "sys.stdin.readline(); print(sum(m[i] for i in range(0, len(m), 4096)), flush=True); sys.stdin.readline()\n")


def test_a_process_moved_into_a_group_is_charged_there_for_what_it_faults_in_and_given_back(tmp_path):
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(8 << 20))
    limits.drop_cache(str(blob))
    p = subprocess.Popen([sys.executable, "-c", TOUCH, str(blob)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        with pool_groups.WorkerGroups(1, 64 << 20) as g:
            joined = g.join([p.pid])
            assert joined[0]["now"] == g.names()[0] != joined[0]["from"]
            before, read0 = g.facts(str(blob))[0], g.reads()["worker 0"]
            p.stdin.write("\n")
            p.stdin.flush()
            p.stdout.readline()                                     # it has faulted the whole file in, inside the group
            after = g.facts(str(blob))[0]
            assert after["in_group"] and after["resident_model_bytes"] >= 8 << 20
            assert after["group"]["usage"] - before["group"]["usage"] >= 8 << 20      # its page cache is charged here
            assert g.reads()["worker 0"] - read0 >= 8 << 20                           # from storage, after the drop
        assert g.removed() and g.final[0]["oom_kills"] == 0
        assert pool_groups.memory_cgroup(p.pid) == joined[0]["from"]               # alive: back where it came from
    finally:
        p.kill()
        p.wait()


def test_pool_stage_on_the_toy_shape_equals_the_engine_in_process_with_each_worker_in_its_own_group(live_ray, tmp_path):
    out, work = tmp_path / "scale.json", tmp_path / "work"
    argv = ["--shape", "qwen3-tiny", "--rounds", "1", "--prompt", "16", "--gen", "4", "--parallel", "1", "--limits", "",
            "--pool-workers", "2", "--pool-fraction", "0.55", "--limit-extra-mib", "256", "--pool-parallel", "1,2",
            "--pool-warmup", "4", "--threads", "2", "--bw-mib", "64", "--work", str(work), "--json", str(out),
            "--markdown", str(tmp_path / "scale.md"), "--plot", str(tmp_path / "scale.png")]
    assert run.main(argv) == 0
    rep = json.load(open(out))
    s, rec = rep["summary"]["pool"], rep["rounds"][0]["pool"]
    assert s["errors"] == {} and s["tokens_equal"] is True and rec["tokens_equal"] == {"1": True, "2": True}
    for pl in ("1", "2"):
        tokens = rec["pool"]["decode"][pl]["tokens"]
        assert tokens == rec["in_process"]["decode"][pl]["tokens"] and len(tokens) == int(pl)
        assert all(len(t) == 5 for t in tokens)                                   # the prefill's token + 4 steps
        d = s["decode"][pl]
        assert isinstance(d["read_bytes_per_token"], (int, float)) and d["read_bytes_per_token"] >= 0
        assert set(d["read_bytes_per_token_by_reader"]) == {"driver", "worker 0", "worker 1"}
        assert d["pool_tok_s"] > 0 and d["in_process_tok_s"] > 0 and d["of_in_process"] > 0
    groups = rec["pool"]["groups"]
    assert [j["now"] for j in rec["pool"]["joined"]] == groups and len(set(groups)) == 2
    for w, group in zip(s["workers_detail"], groups):                              # read from /proc/<pid>/cgroup
        assert w["group"] == group and w["in_group_after_join"] and w["in_group_at_end"] and w["came_from"] != group
        assert w["group_usage_after_warmup"] > 0 and w["oom_kills"] == 0 and w["rows"] > 0
    assert s["off_home"] == 0 and [n for n, _ in rec["pool"]["home"]] == [32, 32]     # 2 layers x 32 experts, once
    assert s["groups_removed"] and not any(os.path.exists(os.path.join(limits.ROOT, g.lstrip("/"))) for g in groups)
    assert "Bigger than one machine" in (tmp_path / "scale.md").read_text()
    assert (tmp_path / "scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert live_ray.is_initialized() and not os.listdir(work)          # the module's Ray stays; scratch is gone


def test_a_worker_oom_killed_in_its_group_is_recorded_and_everything_is_cleaned_up(live_ray, tmp_path):
    out = tmp_path / "scale.json"
    argv = ["--shape", "qwen3-tiny", "--rounds", "1", "--prompt", "16", "--gen", "2", "--parallel", "1", "--limits", "",
            "--pool-workers", "2", "--pool-fraction", "0.01", "--pool-parallel", "1", "--pool-warmup", "2",
            "--threads", "2", "--bw-mib", "64", "--work", str(tmp_path / "work"), "--json", str(out)]
    assert run.main(argv) == 0                                  # a failed stage is recorded, the bench goes on
    rep = json.load(open(out))
    s, rec = rep["summary"]["pool"], rep["rounds"][0]["pool"]
    assert list(s["errors"]) == ["round 0 pool"] and "PoolError" in s["errors"]["round 0 pool"]
    assert s["oom_kills"] >= 1 and s["tokens_equal"] is False and rec["in_process"]["decode"]
    assert s["groups_removed"] and not any(os.path.exists(os.path.join(limits.ROOT, g.lstrip("/")))
                                           for g in rec["pool"]["groups"])
    for j in rec["pool"]["joined"]:                            # the workers are gone with the pool
        assert not os.path.exists(f"/proc/{j['pid']}") or pool_groups.memory_cgroup(j["pid"]) != j["now"]
    assert live_ray.is_initialized() and [n for n in live_ray.nodes() if n["Alive"]]
