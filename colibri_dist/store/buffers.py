"""Owned RAM buffers for cached experts: page-aligned, recycled, optionally NUMA-bound.

Role in the data flow: every RAM-tier entry owns one buffer from here. Buffers
start on a 4096-byte boundary (so they are also 64-byte aligned for the
kernels, and usable for O_DIRECT reads and mbind). Fresh pages are expensive to
fault in (the store benchmark measures it), so buffers of evicted entries are
recycled, but only when nothing outside the store still references them: an
entry in use is never overwritten.
"""
import sys
import threading

import numpy as np

PAGE = 4096


def aligned_empty(nbytes, align=PAGE):
    """uint8 array of nbytes whose data starts on an `align` boundary."""
    raw = np.empty(nbytes + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


def _numa_binder(policy, nodes):
    if not policy or policy == "none":
        return None
    try:
        from .. import numa
    except ImportError:
        return None
    bind = getattr(numa, "bind_buffer", None)
    if bind is None:
        return None
    return lambda array: bind(array, policy, nodes)


class BufferPool:
    """Hands out aligned uint8 buffers; takes back buffers nobody else holds.

    `give_back(buf)` keeps `buf` for reuse only if the caller passed the last
    outside reference (the pool checks the reference count). At most
    `max_free_bytes` are kept idle.
    """

    def __init__(self, max_free_bytes=0, numa_policy=None, numa_nodes=None):
        self.max_free_bytes = int(max_free_bytes)
        self._free = {}            # nbytes -> [buffers]
        self._free_bytes = 0
        self._lock = threading.Lock()
        self._bind = _numa_binder(numa_policy, numa_nodes)
        self.allocated = 0
        self.reused = 0

    def take(self, nbytes):
        with self._lock:
            bucket = self._free.get(nbytes)
            if bucket:
                self._free_bytes -= nbytes
                self.reused += 1
                return bucket.pop()
            self.allocated += 1
        buf = aligned_empty(nbytes)
        if self._bind is not None:
            self._bind(buf)
        return buf

    def give_back(self, buf):
        """Offer a buffer for reuse. The caller must drop its own reference after."""
        # References: the caller's variable, this frame's `buf`, getrefcount's argument.
        if buf is None or sys.getrefcount(buf) > 3 or buf.base is None:
            return False
        if sys.getrefcount(buf.base) > 2:       # a view of the raw block escaped
            return False
        with self._lock:
            if self._free_bytes + buf.nbytes > self.max_free_bytes:
                return False
            self._free.setdefault(buf.nbytes, []).append(buf)
            self._free_bytes += buf.nbytes
        return True

    def clear(self):
        with self._lock:
            self._free.clear()
            self._free_bytes = 0
