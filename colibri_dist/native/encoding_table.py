"""The weight-encoding table as the C core reports it (cb_encoding_of), for checking encodings.py's copy.

Role: colibri_dist/encodings.py holds the table as plain data so format/ needs no compiled core;
this reads the C rows so tests can prove the two equal.
"""
from ..encodings import Encoding
from ._lib import ffi, lib


def encoding_table():
    out = []
    for code in range(lib.CB_DTYPE_COUNT):
        e = lib.cb_encoding_of(code)
        out.append(Encoding(ffi.string(e.name).decode(), int(e.dtype), int(e.bits), bool(e.is_int),
                            int(e.scale_kind), int(e.group), bool(e.zero_point), int(e.qmax),
                            int(e.block_bytes), int(e.row_group)))
    return tuple(out)
