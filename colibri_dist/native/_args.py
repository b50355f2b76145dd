"""Argument checks of the whole-model wrappers (model_ops, attention_ops): numpy in, C pointers out.

Role: every array that reaches C through model_ops is checked here first
(dtype, ndim, shape, C-contiguity), with an InvalidArgument that names the
argument; integer index arrays are narrowed to int32 only after a range check.
"""
import numpy as np

from ..errors import InvalidArgument
from ._lib import ffi

INT32_MAX = 2**31 - 1


def array(name, a, dtypes, ndim, shape=None, writable=False):
    """a must be a C-contiguous ndarray of one of dtypes, ndim dims, matching shape (None = any)."""
    if not isinstance(a, np.ndarray):
        raise InvalidArgument(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype not in dtypes:
        raise InvalidArgument(f"{name} must be {' or '.join(str(np.dtype(d)) for d in dtypes)}, got {a.dtype}")
    if a.ndim != ndim:
        raise InvalidArgument(f"{name} must be {ndim}-D, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise InvalidArgument(f"{name} must be C-contiguous (use np.ascontiguousarray)")
    if writable and not a.flags.writeable:
        raise InvalidArgument(f"{name} must be writable")
    for axis, want in enumerate(shape or ()):
        if want is not None and a.shape[axis] != want:
            raise InvalidArgument(f"{name} has shape {a.shape}, expected {tuple('*' if s is None else s for s in shape)} "
                                  f"(axis {axis}: {a.shape[axis]} != {want})")
    return a


def f32(name, a, ndim, shape=None, writable=False):
    return array(name, a, (np.float32,), ndim, shape, writable)


def int32s(name, a, length=None, lo=0, hi=INT32_MAX):
    """1-D integer sequence -> C-contiguous int32 array, every value in [lo, hi]."""
    arr = a if isinstance(a, np.ndarray) else np.asarray(a)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InvalidArgument(f"{name} must be a 1-D integer array, got {arr.dtype} {arr.shape}")
    if length is not None and arr.size != length:
        raise InvalidArgument(f"{name} has {arr.size} entries, expected {length}")
    if arr.size and (arr.min() < lo or arr.max() > hi):
        i = int(np.flatnonzero((arr < lo) | (arr > hi))[0])
        raise InvalidArgument(f"{name}[{i}] = {int(arr[i])} outside [{lo}, {hi}]")
    if arr.dtype == np.int32 and arr.flags.c_contiguous:
        return arr
    return np.ascontiguousarray(arr, dtype=np.int32)


def ptr(ctype, a):
    return ffi.cast(ctype, ffi.from_buffer(a)) if a is not None else ffi.NULL


def address(a):
    return a.__array_interface__["data"][0]
