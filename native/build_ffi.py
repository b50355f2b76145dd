"""cffi out-of-line build of colibri_dist._native from native/src/*.c.

Role: the only bridge between the C11 core and Python. The cdef is the block
of include/colibri.h between CFFI-BEGIN and CFFI-END, so the header stays the
single source of truth, plus the cb_dtype enum: cffi's cdef does not run the C
preprocessor, and the enum is generated from the CB_ENCODING_LIST macro, so
_dtype_enum() reads the encoding IDs from that list's rows and declares
`typedef enum { CB_F32, ..., CB_DTYPE_COUNT, ... } cb_dtype;` - the trailing
"..." makes cffi take every value from the C compiler, so a code can never
differ between C and Python (an ID read wrongly fails the build). Compiled for a generic x86-64 / aarch64 target: SIMD
kernels select their instruction set per function at run time, never with
-march=native.
"""
import glob
import os
import re
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "include", "colibri.h")


def _cdef_block(path):
    text = open(path, encoding="utf-8").read()
    start = text.index("/* CFFI-BEGIN */") + len("/* CFFI-BEGIN */")
    end = text.index("/* CFFI-END */")
    return text[start:end]


def _dtype_enum(path):
    """cdef text of cb_dtype: the IDs of CB_ENCODING_LIST's rows `X(ID, code, ...)`, values from C."""
    text = open(path, encoding="utf-8").read()
    start = text.index("#define CB_ENCODING_LIST(X)")
    body = text[start:text.index("\n\n", start)]
    ids = re.findall(r"^\s*X\(\s*([A-Z0-9_]+)\s*,", body, flags=re.M)
    if not ids:
        raise RuntimeError(f"{path}: no rows found in CB_ENCODING_LIST")
    names = ", ".join(f"CB_{i}" for i in ids)
    return f"typedef enum {{ {names}, CB_DTYPE_COUNT, ... }} cb_dtype;\n"


def _sources():
    return sorted(os.path.relpath(p) for p in glob.glob(os.path.join(HERE, "src", "*.c")))


CFLAGS = ["-std=c11", "-O3", "-ffp-contract=off", "-fno-math-errno", "-pthread",
          "-D_GNU_SOURCE", "-Wall", "-Wno-unused-function"]

ffibuilder = FFI()
ffibuilder.cdef(_dtype_enum(HEADER) + _cdef_block(HEADER))
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
