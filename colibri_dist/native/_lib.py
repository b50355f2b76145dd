"""cffi handle, status -> NativeError mapping, SIMD level control.

Role: the lowest layer of colibri_dist.native; everything else here calls C
through `lib` and reports failures through `check_status`.
"""
import contextlib

from .._native import ffi, lib
from ..errors import InvalidArgument, NativeError

NATIVE_ERRORS = {
    lib.CB_E_INVALID: "invalid argument", lib.CB_E_NOMEM: "out of memory", lib.CB_E_IO: "i/o error",
    lib.CB_E_FORMAT: "format error", lib.CB_E_UNSUPPORTED: "unsupported", lib.CB_E_SYS: "system call failed",
    lib.CB_E_NONFINITE: "non-finite value",
}


def check_status(status, where, engine=None):
    """Raise NativeError(message, code) unless status is CB_OK."""
    if status == lib.CB_OK:
        return
    detail = lib.cb_engine_last_error(engine) if engine is not None else lib.cb_last_error()
    text = ffi.string(detail).decode("utf-8", "replace") if detail != ffi.NULL else ""
    name = ffi.string(lib.cb_status_str(status)).decode()
    raise NativeError(f"{where}: {name}: {text}" if text else f"{where}: {name}", int(status))


def simd_name():
    """'avx2' or 'scalar': the kernel family the C core uses right now."""
    return ffi.string(lib.cb_simd_name()).decode()


@contextlib.contextmanager
def simd_force(level):
    """Temporarily force a kernel family: 'scalar' or 'avx2' (tests, benchmarks)."""
    codes = {"scalar": 0, "avx2": 2}
    if level not in codes:
        raise InvalidArgument(f"simd level must be 'scalar' or 'avx2', got {level!r}")
    check_status(lib.cb_simd_force(codes[level]), f"simd_force({level!r})")
    try:
        yield
    finally:
        lib.cb_simd_force(-1)
