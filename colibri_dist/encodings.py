"""Weight encodings as the C core defines them (colibri.h cb_encoding, native/src/encodings.c).

Role in the data flow: the Python side's single source of scheme names, cb_dtype codes, bits per
element, scale kinds, group sizes and size rules. format/ (layout, quantize, validate) and
native/views derive their tables from ENCODINGS. The C table is the truth; this is its copy as
plain data, so format/ (and `colibri inspect`) never need the compiled core.
tests/native/test_native_encodings.py checks the copy against native.encoding_table() entry by entry:
a new encoding is one row in the C table and one row here, or that test fails.
"""
from dataclasses import dataclass

SCALE_NONE, SCALE_ROW, SCALE_GROUP, SCALE_MATRIX, SCALE_BLOCK, SCALE_SUPER = 0, 1, 2, 3, 4, 5    # cb_scale_kind


@dataclass(frozen=True)
class Encoding:
    name: str            # scheme name ("int8-g32"): converter --experts, container header
    dtype: int           # cb_dtype code
    bits: int            # bits per stored element
    is_int: bool         # integer codes q with scales (else float words)
    scale_kind: int      # SCALE_*
    group: int           # SCALE_GROUP / SCALE_BLOCK / SCALE_SUPER: group (block) size along cols, else 0
    zero_point: bool     # one int32 zero point per matrix
    qmax: int            # integer kinds: |q| <= qmax (minmax: -qmax-1 <= q <= qmax)
    block_bytes: int     # SCALE_BLOCK / SCALE_SUPER: bytes of one block of `group` elements (scales inside), else 0
    row_group: int = 1   # rows stored in groups of this many (rows a multiple of it; q4_k_r8: 8, q6_k_r16: 16), else 1

    def row_bytes(self, cols):
        if self.scale_kind == SCALE_BLOCK:      # blocks of `group` codes, the last one may be short
            return -(-cols // self.group) * self.block_bytes
        if self.scale_kind == SCALE_SUPER:      # llama.cpp's blocks (k/i-quants, MXFP4): whole only (else -1, as C)
            return -1 if cols % self.group else cols // self.group * self.block_bytes
        return (cols * self.bits + 7) // 8

    @property
    def has_scale_array(self):
        """True when the matrix carries a separate f32 scales array (scale kinds ROW, GROUP, MATRIX)."""
        return self.scale_kind in (SCALE_ROW, SCALE_GROUP, SCALE_MATRIX)

    def data_bytes(self, rows, cols):
        """rows * row_bytes; -1 when no row of `cols` exists (a SUPER encoding's cols not whole blocks) or rows are
        not whole row groups, as C's."""
        rb = self.row_bytes(cols)
        return -1 if rb < 0 or rows % self.row_group else rows * rb

    def scale_count(self, rows, cols):
        return {SCALE_ROW: rows, SCALE_GROUP: rows * (-(-cols // max(self.group, 1))),
                SCALE_MATRIX: 1}.get(self.scale_kind, 0)


# (name, dtype, bits, is_int, scale_kind, group, zero_point, qmax, block_bytes[, row_group]): cb_encoding rows, by
# cb_dtype code
_TABLE = (
    ("f32", 0, 32, False, SCALE_NONE, 0, False, 0, 0),
    ("f16", 1, 16, False, SCALE_NONE, 0, False, 0, 0),
    ("bf16", 2, 16, False, SCALE_NONE, 0, False, 0, 0),
    ("int8", 3, 8, True, SCALE_ROW, 0, False, 127, 0),
    ("int8-g32", 4, 8, True, SCALE_GROUP, 32, False, 127, 0),
    ("int8-g64", 5, 8, True, SCALE_GROUP, 64, False, 127, 0),
    ("int8-g128", 6, 8, True, SCALE_GROUP, 128, False, 127, 0),
    ("int8-minmax", 7, 8, True, SCALE_MATRIX, 0, True, 127, 0),
    ("int4-g32", 8, 4, True, SCALE_GROUP, 32, False, 7, 0),
    ("int4-g64", 9, 4, True, SCALE_GROUP, 64, False, 7, 0),
    ("int6-g64", 10, 6, True, SCALE_GROUP, 64, False, 31, 0),
    ("q8_0", 11, 8, True, SCALE_BLOCK, 32, False, 127, 34),
    ("q4_k", 12, 4, True, SCALE_SUPER, 256, False, 15, 144),
    ("q6_k", 13, 6, True, SCALE_SUPER, 256, False, 32, 210),
    ("q5_k", 14, 5, True, SCALE_SUPER, 256, False, 31, 176),
    ("mxfp4", 15, 4, True, SCALE_SUPER, 32, False, 12, 17),
    ("iq4_xs", 16, 4, True, SCALE_SUPER, 256, False, 127, 136),
    ("iq4_nl", 17, 4, True, SCALE_SUPER, 32, False, 127, 18),
    ("q5_0", 18, 5, True, SCALE_SUPER, 32, False, 16, 22),
    ("q5_1", 19, 5, True, SCALE_SUPER, 32, False, 31, 24),
    ("q4_k_r8", 20, 4, True, SCALE_SUPER, 256, False, 15, 144, 8),     # q4_k's blocks, 8 rows interleaved
    ("q6_k_r16", 21, 6, True, SCALE_SUPER, 256, False, 32, 210, 16),   # q6_k's blocks, 16 rows interleaved
)


ENCODINGS = tuple(Encoding(*row) for row in _TABLE)     # indexed by cb_dtype code
BY_NAME = {e.name: e for e in ENCODINGS}
SCHEMES = {e.name: e.dtype for e in ENCODINGS}             # scheme name -> cb_dtype code
DTYPE_NAMES = {e.dtype: e.name for e in ENCODINGS}
GROUP_SIZE = {e.dtype: e.group for e in ENCODINGS if e.scale_kind == SCALE_GROUP}


def encoding(code):
    """Encoding of a cb_dtype code, or None when the code is unknown."""
    return ENCODINGS[code] if isinstance(code, int) and 0 <= code < len(ENCODINGS) else None


# the encodings a KV cache pool may hold (cb_attn.cache_dtype takes their cb_dtype codes): the one list that
# model/kv_cache.py, native/kv_ops.py and the job config's kv_cache_dtype choices derive from
KV_CACHE_DTYPES = ("f32", "f16", "bf16")
