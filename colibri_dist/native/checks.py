"""Integrity primitives from native/src/crc32_fast.c: CRC-32 and NaN/Inf scans.

Role: the fast path of format/integrity.py (the checks a tensor passes before its
first use). Both take any contiguous buffer without copying; cffi releases the GIL.
"""
from ._lib import ffi, lib


def crc32_update(value, buf, nbytes):
    """CRC-32 (IEEE, = zlib.crc32) of nbytes of a contiguous buffer, chained from value."""
    return int(lib.cb_crc32_update(value & 0xFFFFFFFF, ffi.from_buffer(buf), nbytes))


def count_nonfinite(buf, count, kind):
    """NaN/Inf among `count` values of kind 0 f32, 1 f16, 2 bf16 at the start of buf."""
    return int(lib.cb_count_nonfinite(ffi.from_buffer(buf), count, kind))
