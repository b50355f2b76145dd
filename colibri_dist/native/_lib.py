"""cffi handle, status -> NativeError mapping, SIMD level control.

Role: the lowest layer of colibri_dist.native; everything else here calls C
through `lib` and reports failures through `check_status`.
"""
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
    """Name of the kernel family the C core uses right now: 'scalar', 'avx2' or 'avx512'."""
    return ffi.string(lib.cb_simd_name()).decode()


def simd_levels():
    """{name: None if this CPU/OS supports the level, else the missing flags} for every level, lowest first."""
    out = {}
    for level in (lib.CB_SIMD_SCALAR, lib.CB_SIMD_AVX2, lib.CB_SIMD_AVX512, lib.CB_SIMD_AMX):
        missing = ffi.string(lib.cb_simd_missing(level)).decode()
        out[ffi.string(lib.cb_simd_level_name(level)).decode()] = missing or None
    return out


def simd_available():
    """Names of the levels this CPU/OS runs, lowest first (always includes 'scalar')."""
    return [name for name, missing in simd_levels().items() if missing is None]


class simd_force:
    """Force a kernel family by name ("scalar", "avx2", "avx512", "amx"; tests, benchmarks) from this call on; as a
    context manager the start-up level (COLIBRI_SIMD's cap) comes back when the block ends. Every level gives the
    same bits. A level the CPU lacks raises NativeError naming the missing flags."""

    def __init__(self, level):
        code = lib.cb_simd_level_of(level.encode()) if isinstance(level, str) else -1
        if code < 0:
            raise InvalidArgument(f"simd level must be one of {list(simd_levels())}, got {level!r}")
        check_status(lib.cb_simd_force(code), f"simd_force({level!r})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        lib.cb_simd_force(-1)
        return False
