"""NUMA and pinning calls into the C core (cb_numa_bind, cb_numa_set_policy, cb_pin_thread).

Role: the thin numpy/cffi side of native/src/numa.c, used by colibri_dist.numa.apply.
A failing call raises NativeError whose message names the call, the arguments
and the errno; `.errno` carries the errno value (EPERM, ENOSYS, EINVAL, ...).
"""
import errno as _errno
import os

from ._lib import ffi, lib
from ..errors import InvalidArgument, NativeError

POLICIES = {"none": 0, "bind": 1, "interleave": 2, "preferred": 3}


def _policy_code(policy):
    if policy not in POLICIES:
        raise InvalidArgument(f"unknown memory policy {policy!r}; expected one of {sorted(POLICIES)}")
    return POLICIES[policy]


def _int_array(values):
    values = [int(v) for v in values]
    return ffi.new("int32_t[]", values or [0]), len(values)


def _check(status, what):
    if status == lib.CB_OK:
        return
    err = ffi.errno if status == lib.CB_E_SYS else 0
    reason = ffi.string(lib.cb_status_str(status)).decode()
    if err:
        reason = f"{_errno.errorcode.get(err, err)}: {os.strerror(err)}"
    else:
        reason += ": " + ffi.string(lib.cb_last_error()).decode("utf-8", "replace")
    exc = NativeError(f"{what} failed: {reason}", status)
    exc.errno = err
    raise exc


def numa_bind(address, nbytes, policy, nodes=()):
    """mbind the pages covering [address, address+nbytes) (widened to whole pages)."""
    arr, n = _int_array(nodes)
    status = lib.cb_numa_bind(ffi.cast("void *", int(address)), int(nbytes), _policy_code(policy), arr, n)
    _check(status, f"cb_numa_bind({nbytes} bytes at {int(address):#x}, {policy}, nodes {list(nodes)})")


def numa_set_policy(policy, nodes=()):
    """set_mempolicy for the calling thread (inherited by threads it creates later)."""
    arr, n = _int_array(nodes)
    _check(lib.cb_numa_set_policy(_policy_code(policy), arr, n), f"cb_numa_set_policy({policy}, nodes {list(nodes)})")


def pin_thread(cpus):
    """Pin the calling thread to `cpus`."""
    arr, n = _int_array(cpus)
    _check(lib.cb_pin_thread(arr, n), f"cb_pin_thread(cpus {list(cpus)})")
