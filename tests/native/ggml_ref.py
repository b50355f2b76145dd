"""llama.cpp's own CPU dot products as an oracle: ggml-cpu's type_traits (from_float of the vec_dot_type, vec_dot)
called through ctypes on the libggml-cpu.so of the llama.cpp build (testing/llama_cpp.ROOT), or None when it is not
built.

ggml_products(qtype, raw, x): out [n, rows] float32 with out[t, r] = ggml's vec_dot of weight row r (raw [rows, row
bytes], blocks of gguf type qtype) with token t's row x[t] quantized by the vec_dot_type's from_float (ggml-cpu's own
x86 quantize_row_q8_0 / _q8_1 / _q8_K): exactly what llama.cpp's mul_mat computes per element on this CPU.
"""
import ctypes
import os

import numpy as np

from colibri_dist.testing.llama_cpp import ROOT


class _Traits(ctypes.Structure):        # ggml-cpu.h struct ggml_type_traits_cpu
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p), ("vec_dot_type", ctypes.c_int),
                ("nrows", ctypes.c_int64)]


_FROM = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
_DOT = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def load():
    """(libggml-base, libggml-cpu) of the llama.cpp build, initialised, or None when it is not built."""
    lib = os.path.join(ROOT, "build", "bin")
    try:
        base = ctypes.CDLL(os.path.join(lib, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        cpu = ctypes.CDLL(os.path.join(lib, "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return None
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(_Traits)
    base.ggml_row_size.restype = ctypes.c_size_t
    base.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    cpu.ggml_cpu_init()
    return base, cpu


def ggml_products(libs, qtype, raw, x):
    base, cpu = libs
    t = cpu.ggml_get_type_traits_cpu(int(qtype)).contents
    from_float = _FROM(cpu.ggml_get_type_traits_cpu(t.vec_dot_type).contents.from_float)
    dot = _DOT(t.vec_dot)
    raw, x = np.ascontiguousarray(raw, np.uint8), np.ascontiguousarray(x, np.float32)
    rows, cols = raw.shape[0], x.shape[1]
    out = np.zeros((x.shape[0], rows), np.float32)
    y = np.zeros(base.ggml_row_size(t.vec_dot_type, cols), np.uint8)
    s = np.zeros(1, np.float32)
    for i in range(x.shape[0]):
        from_float(x[i].ctypes.data, y.ctypes.data, cols)
        for r in range(rows):
            dot(cols, s.ctypes.data, 0, raw[r].ctypes.data, 0, y.ctypes.data, 0, 1)
            out[i, r] = s[0]
    return out
