"""cffi out-of-line build of colibri_dist._native from native/src/*.c.

Role: the only bridge between the C11 core and Python. The cdef is the block
of include/colibri.h between CFFI-BEGIN and CFFI-END, so the header stays the
single source of truth. Compiled for a generic x86-64 / aarch64 target: SIMD
kernels select their instruction set per function at run time, never with
-march=native.
"""
import glob
import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "include", "colibri.h")


def _cdef_block(path):
    text = open(path, encoding="utf-8").read()
    start = text.index("/* CFFI-BEGIN */") + len("/* CFFI-BEGIN */")
    end = text.index("/* CFFI-END */")
    return text[start:end]


def _sources():
    return sorted(os.path.relpath(p) for p in glob.glob(os.path.join(HERE, "src", "*.c")))


CFLAGS = ["-std=c11", "-O3", "-ffp-contract=off", "-fno-math-errno", "-pthread",
          "-D_GNU_SOURCE", "-Wall", "-Wno-unused-function"]

ffibuilder = FFI()
ffibuilder.cdef(_cdef_block(HEADER))
ffibuilder.set_source(
    "colibri_dist._native",
    '#include "colibri.h"\n',
    sources=_sources(),
    include_dirs=[os.path.relpath(os.path.join(HERE, "include"))],
    extra_compile_args=CFLAGS,
    extra_link_args=["-pthread", "-lm"],
)

if __name__ == "__main__":
    # Developer rebuild after editing C: python setup.py build_ext --inplace -q
    sys.exit("build with: python setup.py build_ext --inplace -q")
