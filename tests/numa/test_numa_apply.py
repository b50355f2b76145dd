"""numa.apply / bind_buffer on this machine: live pinning read back from /proc, the fallback path.

Everything that changes process state (affinity, memory policy) runs in a forked
child so the test process is left as it was.
"""
import importlib
import multiprocessing
import os
import sys
import threading
import time
import warnings

import numpy as np
import pytest

from colibri_dist import numa
from colibri_dist.errors import InvalidArgument, NativeError
from colibri_dist.numa.plan import WorkerPlan

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux pinning and mbind")
CTX = multiprocessing.get_context("fork")


def _child_main(conn, fn, env):
    os.environ.update(env)
    importlib.import_module("colibri_dist.numa.apply")._reset_for_tests()  # the module, not numa.apply()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = fn()
        conn.send(("ok", result, [str(w.message) for w in caught if w.category is numa.NumaFallbackWarning]))
    except BaseException as exc:  # report everything to the parent
        conn.send(("error", repr(exc), []))
    conn.recv()  # stay alive until the parent has read /proc/<pid>
    conn.close()


def in_child(fn, env=None, inspect=None):
    """Run fn() in a forked child; inspect(pid) runs while the child is alive. Returns (result, warnings)."""
    parent, child = CTX.Pipe()
    proc = CTX.Process(target=_child_main, args=(child, fn, env or {}))
    proc.start()
    try:
        if not parent.poll(60):
            raise AssertionError(f"child {proc.pid} sent nothing in 60 s (exit code {proc.exitcode})")
        status, result, caught = parent.recv()
        seen = inspect(proc.pid) if inspect else None
        parent.send("done")
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    assert status == "ok", result
    return result, caught, seen


def _threads_allowed(pid):
    """{tid: Cpus_allowed_list} of the process's live threads; a thread that finished (a joined side thread is
    still listed for a moment on a loaded machine) is gone by the time its status is read, and skipped."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            if line.startswith("Cpus_allowed_list:"):
                out[int(tid)] = line.split(":")[1].strip()
    return out


def live_worker(planned, wpn, mem_policy, **overrides):
    """Worker `planned` of this machine's plan, with fields overridden."""
    topo = numa.topology()
    w = numa.plan(topo, workers_per_node=wpn, mem_policy=mem_policy).workers[planned]
    fields = {f: getattr(w, f) for f in w.__dataclass_fields__}
    fields.update(overrides)
    return WorkerPlan(**fields)


ALLOWED = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(len(ALLOWED) < 2 or ALLOWED[:2] != [0, 1], reason="needs CPUs 0 and 1")


def _apply_with_helper_thread(worker):
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, daemon=True)
    helper.start()  # exists before apply: must be pinned too
    report = numa.apply(worker)
    report["helper_affinity"] = sorted(os.sched_getaffinity(helper.native_id))
    stop.set()
    helper.join()  # gone before the parent lists /proc/<pid>/task (an exiting thread's status can vanish mid-read)
    return report


@needs_two_cpus
def test_live_worker_is_pinned_as_planned_and_visible_in_proc():
    worker = live_worker(1, 2, "none")
    assert worker.cpus == (1,)
    report, caught, seen = in_child(lambda: _apply_with_helper_thread(worker),
                                    inspect=lambda pid: _threads_allowed(pid))
    assert caught == []
    assert report["mode"] == "numa" and report["fallback_reason"] is None
    assert report["cpus"] == [1] and report["cpus_allowed_list"] == "1"
    assert report["threads_pinned"] >= 2 and report["helper_affinity"] == [1]
    assert set(seen.values()) == {"1"}, seen  # every thread, read by the parent from /proc/<pid>/task


@needs_two_cpus
def test_apply_from_a_side_thread_pins_the_main_thread_too():
    worker = live_worker(1, 2, "none")

    def run():
        out = {}
        t = threading.Thread(target=lambda: out.update(report=numa.apply(worker)))
        t.start()
        t.join()
        out["main"] = sorted(os.sched_getaffinity(0))
        return out

    out, _, seen = in_child(run, inspect=_threads_allowed)
    assert out["report"]["mode"] == "numa" and out["main"] == [1]
    assert set(seen.values()) == {"1"}


@needs_two_cpus
@pytest.mark.parametrize("policy,shown", [("bind", "bind:0"), ("preferred", "prefer:0"), ("interleave", "interleave:0")])
def test_memory_policy_is_applied_and_shows_in_numa_maps(policy, shown):
    # a two-memory-node plan (n_mem_nodes=2) so binding "makes sense"; node 0 exists here
    worker = live_worker(0, 2, policy, n_mem_nodes=2)
    report, caught, _ = in_child(lambda: numa.apply(worker))
    assert caught == [] and report["mode"] == "numa"
    assert report["mem_policy"] == policy and report["mem_nodes"] == [0]
    assert shown in report["numa_maps"]["policies"], report["numa_maps"]
    assert report["cpus_allowed_list"] == "0"


def test_one_memory_node_falls_back_to_round_robin_with_one_warning():
    topo = numa.topology()
    if len(topo.memory_nodes) != 1:
        pytest.skip("this test is for a one-node machine")
    worker = live_worker(0, 1, "bind")

    def run():
        first = numa.apply(worker)
        second = numa.apply(worker)
        return first, second, numa.stats()

    (first, second, stats), caught, _ = in_child(run)
    assert len(caught) == 1 and "one NUMA node" in caught[0] and "round-robin" in caught[0]
    assert first["mode"] == second["mode"] == "fallback"
    assert first["cpus"] == list(numa.round_robin_cpus(0, worker.n_workers, ALLOWED))
    assert first["cpus_allowed_list"] == numa.format_cpulist(first["cpus"])
    assert first["mem_policy"] == "none" and len(stats["fallback_reasons"]) == 2


@needs_two_cpus
def test_fallback_spreads_over_the_cpus_allowed_before_pinning():
    # planned CPU 1 is pinned first, then the policy fails: round-robin must use every allowed CPU
    worker = live_worker(1, 2, "bind", n_mem_nodes=2, index=0, n_workers=1)
    report, caught, _ = in_child(lambda: numa.apply(worker), env={"COLIBRI_NUMA_FAIL": "set_policy"})
    assert report["mode"] == "fallback" and report["cpus"] == ALLOWED
    assert report["cpus_allowed_list"] == numa.format_cpulist(ALLOWED)


@needs_two_cpus
@pytest.mark.parametrize("env,expect", [({"COLIBRI_NUMA_FAIL": "set_policy"}, "EPERM"),
                                        ({"COLIBRI_NUMA_FAIL": "mbind"}, "EPERM"), ({}, "EINVAL")])
def test_failed_memory_policy_falls_back(env, expect):
    # injected EPERM, and a real EINVAL from the kernel for a node that does not exist here
    nodes = (0,) if env else (63,)
    worker = live_worker(1, 2, "bind", n_mem_nodes=2, mem_nodes=nodes, n_workers=2)
    report, caught, seen = in_child(lambda: numa.apply(worker), env=env,
                                    inspect=lambda pid: numa.read_status(pid))
    assert report["mode"] == "fallback" and expect in report["fallback_reason"]
    assert len(caught) == 1 and expect in caught[0]
    assert report["cpus"] == [ALLOWED[1]]  # worker 1 of 2 -> allowed[1::2]
    assert seen["cpus_allowed_list"] == numa.format_cpulist(report["cpus"])


def test_injected_pin_failure_leaves_the_process_unpinned_and_says_so():
    worker = live_worker(0, 1, "none")
    report, caught, _ = in_child(lambda: numa.apply(worker), env={"COLIBRI_NUMA_FAIL": "pin"})
    assert report["mode"] == "unpinned" and "EPERM" in report["fallback_reason"]
    assert "round-robin pinning" in report["error"] and len(caught) == 1
    assert report["cpus_allowed_list"] == numa.format_cpulist(ALLOWED)


def test_pinning_to_cpus_that_do_not_exist_falls_back():
    worker = live_worker(0, 1, "none", cpus=(4000,), n_workers=1)
    report, caught, _ = in_child(lambda: numa.apply(worker))
    assert report["mode"] == "fallback" and "pinning worker 0 to CPUs 4000 failed" in report["fallback_reason"]
    assert report["cpus"] == ALLOWED and len(caught) == 1


def _bind_and_touch(policy, nodes, make):
    buf = make()
    ok = numa.bind_buffer(buf, policy, nodes)
    buf[:] = 7  # fault the pages in after binding
    return ok, numa.numa_maps_entry(buf.ctypes.data), numa.stats()


@pytest.mark.parametrize("make", [lambda: numa.alloc_buffer(1 << 20), lambda: np.zeros(1 << 20, np.uint8)],
                         ids=["mmap", "numpy"])
def test_bind_buffer_to_node_zero_on_a_real_buffer(make):
    (ok, line, stats), caught, _ = in_child(lambda: _bind_and_touch("bind", [0], make))
    assert ok is True and caught == []
    assert " bind:0 " in line and "N0=" in line, line
    assert stats["buffers_bound"] == 1 and stats["buffer_bytes_bound"] == 1 << 20


def test_bind_buffer_fallback_when_mbind_fails():
    def run():
        results = [numa.bind_buffer(numa.alloc_buffer(1 << 16), "bind", [0]) for _ in range(3)]
        return results, numa.stats()

    (results, stats), caught, _ = in_child(run, env={"COLIBRI_NUMA_FAIL": "mbind"})
    assert results == [False, False, False]
    assert len(caught) == 1 and "EPERM" in caught[0] and "round-robin" in caught[0]
    assert stats["buffer_bind_failures"] == 3 and stats["buffers_bound"] == 0


def test_bind_buffer_to_absent_node_returns_false():
    (ok, line, _), caught, _ = in_child(lambda: _bind_and_touch("bind", [63], lambda: numa.alloc_buffer(1 << 16)))
    assert ok is False and len(caught) == 1 and "EINVAL" in caught[0]
    assert "bind:" not in line


def test_bind_buffer_rejects_bad_arguments():
    with pytest.raises(InvalidArgument, match="policy 'local'"):
        numa.bind_buffer(np.zeros(16, np.uint8), "local", [0])
    with pytest.raises(InvalidArgument, match="C-contiguous"):
        numa.bind_buffer(np.zeros((8, 8), np.float32)[:, ::2], "bind", [0])
    assert numa.bind_buffer(np.zeros(0, np.uint8), "bind", [0]) is True


def test_native_calls_validate_and_report_errno():
    from colibri_dist.native import numa as native_numa
    with pytest.raises(NativeError) as info:
        native_numa.pin_thread([])
    assert info.value.code == 1
    with pytest.raises(NativeError, match="EINVAL") as info:
        native_numa.numa_set_policy("bind", [63])
    assert info.value.code == 6 and info.value.errno == 22
    with pytest.raises(NativeError, match="preferred") as info:
        native_numa.numa_set_policy("preferred", [0, 1])
    assert info.value.code == 1
    with pytest.raises(InvalidArgument):
        native_numa.numa_set_policy("sideways", [0])


@needs_two_cpus
def test_native_pin_thread_pins_only_the_calling_thread():
    def run():
        from colibri_dist.native import numa as native_numa
        out = {}

        def worker():
            native_numa.pin_thread([1])
            out["thread"] = sorted(os.sched_getaffinity(threading.get_native_id()))

        t = threading.Thread(target=worker)
        t.start()
        t.join()
        out["main"] = sorted(os.sched_getaffinity(0))
        return out

    out, _, _ = in_child(run)
    assert out["thread"] == [1] and out["main"] == ALLOWED


def test_round_robin_assignment():
    assert numa.round_robin_cpus(0, 2, [0, 1, 2, 3, 4]) == (0, 2, 4)
    assert numa.round_robin_cpus(1, 2, [0, 1, 2, 3, 4]) == (1, 3)
    assert numa.round_robin_cpus(3, 4, [5, 6]) == (6,)
