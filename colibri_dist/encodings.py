"""Weight encodings as the C core defines them (colibri.h cb_encoding, native/src/encodings.c).

Role in the data flow: the single source of scheme names, cb_dtype codes, bits
per element, scale kinds, group sizes and size rules. format/ (layout, quantize,
validate) and native/views derive their tables from ENCODINGS, so a new
encoding is added in one C table. Read once at import through cffi: this is a
table of constants, the one place outside native/ that touches colibri_dist._native.
"""
from dataclasses import dataclass

from ._native import ffi, lib

SCALE_NONE, SCALE_ROW, SCALE_GROUP, SCALE_MATRIX = (lib.CB_SCALE_NONE, lib.CB_SCALE_ROW, lib.CB_SCALE_GROUP,
                                                    lib.CB_SCALE_MATRIX)


@dataclass(frozen=True)
class Encoding:
    name: str            # scheme name ("int8-g32"): converter --experts, container header
    dtype: int           # cb_dtype code
    bits: int            # bits per stored element
    is_int: bool         # integer codes q with scales (else float words)
    scale_kind: int      # SCALE_*
    group: int           # SCALE_GROUP: group size along cols, else 0
    zero_point: bool     # one int32 zero point per matrix
    qmax: int            # integer kinds: |q| <= qmax (minmax: -qmax-1 <= q <= qmax)

    def row_bytes(self, cols):
        return (cols * self.bits + 7) // 8

    def data_bytes(self, rows, cols):
        return rows * self.row_bytes(cols)

    def scale_count(self, rows, cols):
        return {SCALE_ROW: rows, SCALE_GROUP: rows * (-(-cols // max(self.group, 1))),
                SCALE_MATRIX: 1}.get(self.scale_kind, 0)


def _read():
    out = []
    for code in range(lib.CB_DTYPE_COUNT):
        e = lib.cb_encoding_of(code)
        out.append(Encoding(ffi.string(e.name).decode(), int(e.dtype), int(e.bits), bool(e.is_int),
                            int(e.scale_kind), int(e.group), bool(e.zero_point), int(e.qmax)))
    return tuple(out)


ENCODINGS = _read()                                       # indexed by cb_dtype code
BY_NAME = {e.name: e for e in ENCODINGS}
SCHEMES = {e.name: e.dtype for e in ENCODINGS}             # scheme name -> cb_dtype code
DTYPE_NAMES = {e.dtype: e.name for e in ENCODINGS}
GROUP_SIZE = {e.dtype: e.group for e in ENCODINGS if e.scale_kind == SCALE_GROUP}


def encoding(code):
    """Encoding of a cb_dtype code, or None when the code is unknown."""
    return ENCODINGS[code] if isinstance(code, int) and 0 <= code < len(ENCODINGS) else None
