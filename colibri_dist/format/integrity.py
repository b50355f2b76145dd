"""Checks on tensor *data*: CRC-32 at memory speed and finiteness of weights and scales.

Role in the data flow: the reader (format/reader.py) runs `check_entry` on a
tensor or expert blob before its first use in a process (mmap views: once,
then remembered by `FirstUse`; preads into RAM: every read), `verify()` runs it
on everything, and the converter and hot-add run `check_values` on what they
are about to write. A mismatch or a NaN/Inf raises IntegrityError (a
FormatError) naming the file and the layer/expert or tensor, so a damaged or
hostile container gives the same error on every path, tier and budget.

The CRC is the container's (IEEE, equal to zlib.crc32); native/src/crc32_fast.c
computes it with PCLMULQDQ folding (~15 GB/s here against ~2.4 GB/s for zlib,
docs/STORE.md "Integrity checks"). format/ never imports the compiled core: importing
colibri_dist.native registers the fast CRC and NaN counter here (use_native); without it
(e.g. `colibri inspect` on a machine without the C build) zlib and numpy do the same checks.
"""
import threading
import zlib

import numpy as np

from ..errors import IntegrityError
from .layout import MatrixLayout

# cb_dtype codes of float expert encodings -> cb_count_nonfinite kinds (f32, f16, bf16)
_FLOAT_SCHEMES = {0: 0, 1: 1, 2: 2}
# storage dtypes of plain tensors that hold floats -> (kind, element size)
_FLOAT_STORAGE = {0: (0, 4), 1: (1, 2), 2: (2, 2), 8: (None, 8)}

_native = False


def use_native(checks):
    """Called by colibri_dist.native on import with native.checks (crc32_update, count_nonfinite)."""
    global _native
    _native = checks


def _lib():
    return _native


def crc32(data, value=0):
    """CRC-32 of a contiguous bytes-like object (chainable, = zlib.crc32)."""
    nat = _lib()
    mv = memoryview(data)
    if nat and mv.contiguous:
        return nat.crc32_update(value, mv.cast("B"), mv.nbytes)
    return zlib.crc32(mv, value) & 0xFFFFFFFF


def count_nonfinite(raw, kind):
    """NaN/Inf among the values in uint8 array `raw` (kind 0 f32, 1 f16, 2 bf16)."""
    size = (4, 2, 2)[kind]
    n = raw.nbytes // size
    nat = _lib()
    if nat and n:
        return nat.count_nonfinite(raw, n, kind)
    words = raw[:n * size].view((np.uint32, np.uint16, np.uint16)[kind])
    mask = (0x7F800000, 0x7C00, 0x7F80)[kind]
    return int(np.count_nonzero((words & mask) == mask))


def matrix_problem(buf, m, part="matrix"):
    """None, or what is wrong with one encoded matrix (MatrixLayout m, offsets into buf): its
    scales must be finite, and so must its data when the encoding is f32/f16/bf16."""
    if m.scale_offset >= 0 and m.scale_count:
        bad = count_nonfinite(buf[m.scale_offset:m.scale_offset + 4 * m.scale_count], 0)
        if bad:
            return f"{part} has {bad} non-finite scale(s)"
    kind = _FLOAT_SCHEMES.get(m.dtype)
    if kind is not None:
        bad = count_nonfinite(buf[m.data_offset:m.data_offset + m.data_bytes], kind)
        if bad:
            return f"{part} has {bad} non-finite weight(s)"
    return None


def blob_problem(blob, layout):
    """None, or what is wrong with the values of an expert blob (scales, float weights, biases)."""
    for part, m in zip(("gate", "up", "down"), (layout.gate, layout.up, layout.down)):
        problem = matrix_problem(blob, m, part)
        if problem is not None:
            return problem
    for part, off, n in zip(("gate", "up", "down"), layout.biases or (), (layout.inter, layout.inter, layout.hidden)):
        bad = count_nonfinite(blob[off:off + 4 * n], 0)
        if bad:
            return f"{part} bias has {bad} non-finite value(s)"
    return None


def tensor_problem(raw, dtype):
    """None, or a description of the NaN/Inf values in a plain float tensor's bytes."""
    kind, size = _FLOAT_STORAGE.get(dtype, (None, 0))
    if kind is not None:
        bad = count_nonfinite(raw, kind)
    elif size:
        bad = int(np.count_nonzero(~np.isfinite(raw[:raw.nbytes // 8 * 8].view(np.float64))))
    else:
        return None
    return f"{bad} non-finite value(s)" if bad else None


def entry_problem(raw, entry, layout=None):
    """None or the reason `raw` (the entry's bytes) must not be used: checksum, then values.
    layout: the ExpertLayout of a blob entry, the MatrixLayout of an encoded-matrix entry, or
    None for a plain tensor (its storage dtype decides)."""
    if crc32(raw) != entry.crc32:
        return (f"damaged (checksum mismatch at offset {entry.offset}, {entry.nbytes} bytes)")
    if layout is None:
        problem = tensor_problem(raw, entry.dtype)
    elif isinstance(layout, MatrixLayout):
        problem = matrix_problem(raw, layout)
    else:
        problem = blob_problem(raw, layout)
    return None if problem is None else f"invalid: {problem}"


def raise_problem(path, what, problem):
    raise IntegrityError(f"{path}: {what} is {problem}")


class FirstUse:
    """Which entries this process has checked already (thread-safe; a race checks twice)."""

    def __init__(self):
        self._done = set()
        self._lock = threading.Lock()

    def seen(self, key):
        return key in self._done

    def mark(self, key):
        with self._lock:
            self._done.add(key)

    def count(self):
        return len(self._done)


def check_values(path, what, arr):
    """Converter / hot-add: refuse NaN or Inf in a float array about to be written."""
    arr = np.asarray(arr)
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise IntegrityError(f"{path}: {what} has {bad} non-finite value(s) (NaN or Inf)")
    return arr



def checked_chunks(path, name, dtype, chunks):
    """Converter: pass a dense tensor's raw chunks (storage dtype `dtype`) through, refusing NaN/Inf."""
    for chunk in chunks:
        raw = np.frombuffer(chunk, dtype=np.uint8)
        problem = tensor_problem(raw, dtype)
        if problem is not None:
            raise IntegrityError(f"{path}: tensor {name!r} has {problem} (NaN or Inf)")
        yield chunk
