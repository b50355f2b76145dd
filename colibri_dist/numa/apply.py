"""Apply a worker's NUMA plan to the running process, and bind cache buffers.

Role: the last step of NUMA placement, run inside each worker process.
`apply(worker)` pins the process and every thread it has (threads created later
inherit the mask), sets the memory policy of the calling thread through the
native core (inherited by native threads it starts later), and returns what was
applied, read back from /proc/self/status and /proc/self/numa_maps.
`bind_buffer(array, policy, nodes)` mbinds one cache buffer (used by the store).

When binding fails (EPERM, ENOSYS, EINVAL) or makes no sense (the machine has a
single node with memory), the worker falls back to round-robin CPU assignment
over the CPUs it may use (worker i of n gets allowed[i::n]) with no memory
policy, and ONE NumaFallbackWarning is issued per process; every later event
is only recorded in stats().

Test hook: COLIBRI_NUMA_FAIL=mbind,set_policy,pin makes those calls fail as
if the kernel had answered EPERM ("mbind" fails both memory calls: mbind and
set_mempolicy; "set_policy" only the latter; "pin" the affinity calls).
"""
import errno
import os
import re
import threading
import warnings
from collections import Counter

import numpy as np

from ..errors import InvalidArgument, NativeError
from .plan import MEM_POLICIES
from .topology import format_cpulist

FAIL_ENV = "COLIBRI_NUMA_FAIL"


class NumaFallbackWarning(UserWarning):
    """NUMA binding failed or makes no sense here; round-robin CPUs are used instead."""


_STATE = {"warned": False, "applied": None, "fallback_reasons": [],
          "buffers_bound": 0, "buffer_bytes_bound": 0, "buffer_bind_failures": 0}


def _injected_failure(call):
    wanted = {s.strip() for s in os.environ.get(FAIL_ENV, "").split(",") if s.strip()}
    if call in wanted:
        exc = NativeError(f"{call} failed: EPERM (injected by {FAIL_ENV})", 6)
        exc.errno = errno.EPERM
        raise exc


def _native():
    from ..native import numa as native_numa  # imported lazily: plans work without the C core
    return native_numa


def _fallback(reason):
    """Record a fallback event; warn only for the first one in this process."""
    _STATE["fallback_reasons"].append(reason)
    if not _STATE["warned"]:
        _STATE["warned"] = True
        warnings.warn(f"colibri NUMA: {reason}; falling back to round-robin CPU assignment "
                      f"without a memory policy", NumaFallbackWarning, stacklevel=3)


def read_status(pid="self"):
    """Cpus_allowed_list and Mems_allowed_list of /proc/<pid>/status (None off Linux)."""
    out = {"cpus_allowed_list": None, "mems_allowed_list": None}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == "Cpus_allowed_list":
                    out["cpus_allowed_list"] = value.strip()
                elif key == "Mems_allowed_list":
                    out["mems_allowed_list"] = value.strip()
    except OSError:
        pass
    return out


def numa_maps_summary(pid="self"):
    """Policies and resident pages per node over every mapping of /proc/<pid>/numa_maps."""
    policies, pages = Counter(), Counter()
    try:
        with open(f"/proc/{pid}/numa_maps", encoding="ascii", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 2:
                    continue
                policies[fields[1]] += 1
                for m in re.finditer(r"\bN(\d+)=(\d+)", line):
                    pages[int(m.group(1))] += int(m.group(2))
    except OSError:
        return None
    return {"policies": dict(policies), "pages_per_node": {str(k): v for k, v in sorted(pages.items())}}


def _mapping_start(address, pid):
    with open(f"/proc/{pid}/maps", encoding="ascii") as f:
        for line in f:
            start, end = (int(v, 16) for v in line.split()[0].split("-"))
            if start <= address < end:
                return start
    return None


def numa_maps_entry(address, pid="self"):
    """The numa_maps line of the mapping that contains `address`, or None."""
    try:
        start = _mapping_start(address, pid)
        with open(f"/proc/{pid}/numa_maps", encoding="ascii", errors="replace") as f:
            for line in f:
                if start is not None and int(line.split()[0], 16) == start:
                    return line.strip()
    except OSError:
        pass
    return None


def pin_process(cpus):
    """sched_setaffinity on every thread of this process; returns how many threads were pinned."""
    _injected_failure("pin")
    if not hasattr(os, "sched_setaffinity"):
        raise OSError(errno.ENOSYS, "sched_setaffinity is not available on this platform")
    cpus = set(int(c) for c in cpus)
    os.sched_setaffinity(0, cpus)
    pinned = 1
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return pinned
    me = threading.get_native_id()
    for tid in tids:
        if tid == me:
            continue
        try:
            os.sched_setaffinity(tid, cpus)
            pinned += 1
        except ProcessLookupError:
            continue  # the thread exited meanwhile
    return pinned


def set_memory_policy(policy, nodes):
    """Memory policy of the calling thread via the native core (raises NativeError)."""
    if policy != "none":
        _injected_failure("set_policy")
        _injected_failure("mbind")  # the hook "mbind" stands for every memory-binding call
    _native().numa_set_policy(policy, nodes)


def round_robin_cpus(index, n_workers, allowed=None):
    """Worker `index` of `n_workers` gets allowed[index::n_workers] (one CPU, shared, if too few)."""
    allowed = sorted(_allowed_cpus() if allowed is None else allowed)
    if n_workers <= len(allowed):
        return tuple(allowed[index % n_workers::n_workers])
    return (allowed[index % len(allowed)],)


def _try_numa(worker):
    """Pin as planned and set the policy; return (threads_pinned, failure reason or None)."""
    if worker.mem_policy != "none" and worker.n_mem_nodes < 2:
        return 0, "this machine has one NUMA node with memory, so memory binding makes no sense"
    try:
        threads = pin_process(worker.cpus)
    except (OSError, NativeError) as exc:
        return 0, f"pinning worker {worker.index} to CPUs {format_cpulist(worker.cpus)} failed ({exc})"
    if worker.mem_policy != "none":
        try:
            set_memory_policy(worker.mem_policy, worker.mem_nodes)
        except (NativeError, ImportError) as exc:
            return threads, f"memory policy {worker.mem_policy} on nodes {list(worker.mem_nodes)} failed ({exc})"
    return threads, None


def _allowed_cpus():
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _fallback_pin(worker, allowed):
    cpus = round_robin_cpus(worker.index, worker.n_workers, allowed)
    try:
        set_memory_policy("none", ())
    except (NativeError, ImportError):
        pass  # the default policy is what we want anyway
    try:
        return cpus, pin_process(cpus), None
    except (OSError, NativeError) as exc:
        return (), 0, f"round-robin pinning to {format_cpulist(cpus)} failed too ({exc})"


def apply(worker, read_numa_maps=True):
    """Apply `worker` (a numa.plan.WorkerPlan) to this process; return what was applied."""
    allowed = _allowed_cpus()  # before pinning: the fallback spreads over what we may use, not the plan
    threads, reason = _try_numa(worker)
    mode, cpus, policy, mem_nodes, error = "numa", tuple(worker.cpus), worker.mem_policy, worker.mem_nodes, None
    if reason is not None:
        _fallback(reason)
        cpus, threads, error = _fallback_pin(worker, allowed)
        mode, policy, mem_nodes = ("fallback" if cpus else "unpinned"), "none", ()
    readback = read_status()
    report = {
        "pid": os.getpid(), "worker": worker.index, "node": worker.node, "mode": mode,
        "requested": {"cpus": list(worker.cpus), "mem_policy": worker.mem_policy, "mem_nodes": list(worker.mem_nodes)},
        "cpus": sorted(cpus), "threads_pinned": threads, "mem_policy": policy, "mem_nodes": list(mem_nodes),
        "fallback_reason": reason, "error": error,
        "cpus_allowed_list": readback["cpus_allowed_list"], "mems_allowed_list": readback["mems_allowed_list"],
        "numa_maps": numa_maps_summary() if read_numa_maps else None,
    }
    _STATE["applied"] = report
    return report


def _buffer_address(array):
    arr = np.asarray(array) if not isinstance(array, np.ndarray) else array
    if not arr.flags.c_contiguous:
        raise InvalidArgument(f"bind_buffer needs a C-contiguous buffer, got strides {arr.strides}")
    return arr.ctypes.data, arr.nbytes


def bind_buffer(array, policy, nodes=()):
    """mbind the pages of `array` (widened to whole pages) to `nodes`; False (one warning) on failure."""
    if policy not in MEM_POLICIES:
        raise InvalidArgument(f"bind_buffer policy {policy!r}: expected bind, interleave, preferred or none")
    address, nbytes = _buffer_address(array)
    if nbytes == 0:
        return True
    try:
        _injected_failure("mbind")
        _native().numa_bind(address, nbytes, policy, tuple(int(n) for n in nodes))
    except (NativeError, ImportError) as exc:
        _STATE["buffer_bind_failures"] += 1
        _fallback(f"binding a {nbytes}-byte buffer with policy {policy} to nodes {list(nodes)} failed ({exc})")
        return False
    _STATE["buffers_bound"] += 1
    _STATE["buffer_bytes_bound"] += nbytes
    return True


def alloc_buffer(nbytes, policy="none", nodes=()):
    """Page-aligned uint8 buffer from an anonymous mapping, bound before its first touch."""
    import mmap
    if nbytes <= 0:
        raise InvalidArgument(f"alloc_buffer: nbytes must be > 0, got {nbytes}")
    mapping = mmap.mmap(-1, nbytes)
    array = np.frombuffer(mapping, dtype=np.uint8)  # keeps the mapping alive
    if policy != "none":
        bind_buffer(array, policy, nodes)
    return array


def stats():
    """What this process applied, for pool.stats(): last apply() report and buffer binding counts."""
    return {"applied": _STATE["applied"], "fallback_reasons": list(_STATE["fallback_reasons"]),
            "buffers_bound": _STATE["buffers_bound"], "buffer_bytes_bound": _STATE["buffer_bytes_bound"],
            "buffer_bind_failures": _STATE["buffer_bind_failures"]}


def _reset_for_tests():
    _STATE.update(warned=False, applied=None, fallback_reasons=[], buffers_bound=0,
                  buffer_bytes_bound=0, buffer_bind_failures=0)


__all__ = ["apply", "bind_buffer", "alloc_buffer", "stats", "read_status", "numa_maps_summary",
           "numa_maps_entry", "round_robin_cpus", "pin_process", "NumaFallbackWarning"]
