"""Binary layout of a .colibri file: header, tensor-table entries, codes.

Role in the data flow: the single Python definition of the on-disk structures
that writer.py packs, reader.py unpacks and native/src/model.c reads with the
same offsets (docs/FORMAT.md is the prose version of this file). Everything is
little-endian and fixed-size so C reads it without a JSON parser.

File = [header 512 B | zero pad to DATA_START] [tensor data ...] [table] [meta JSON]
"""
import struct
import zlib
from dataclasses import dataclass

from .gating_spec import GATING_KINDS, GATING_NAMES   # noqa: F401  header gating_kind codes (one table)
from .layout import MatrixLayout

MAGIC = b"COLIBRI\0"
VERSION = 1
HEADER_SIZE = 512
DATA_START = 4096          # first tensor byte; the header block is padded to here
ENTRY_SIZE = 384
NAME_BYTES = 128           # entry name field, UTF-8, NUL padded (<= 127 bytes used)
MAX_NDIM = 4
MAX_LAYERS = 1024          # moe_mask bits
TENSOR_ALIGN = 64          # every tensor starts on this boundary
# expert and shared-expert blobs start on layout.BLOB_ALIGN (4096)

# Header: (field, struct code). Offsets follow from the order (no implicit padding: "<").
HEADER_FIELDS = [
    ("magic", "8s"), ("version", "I"), ("header_size", "I"), ("flags", "I"),
    ("entry_size", "I"), ("table_offset", "Q"), ("table_count", "Q"),
    ("meta_offset", "Q"), ("meta_bytes", "Q"), ("file_size", "Q"),
    ("table_crc", "I"), ("meta_crc", "I"),
    ("family", "32s"), ("scheme", "16s"), ("scheme_code", "i"),
    ("hidden", "i"), ("inter", "i"), ("n_experts", "i"), ("top_k", "i"),
    ("n_layers", "i"), ("n_moe_layers", "i"), ("shared_inter", "i"), ("shared_gate", "i"),
    ("gating_kind", "i"), ("n_group", "i"), ("topk_group", "i"), ("norm_topk_prob", "i"),
    ("routed_scaling_factor", "f"), ("moe_mask", "128s"),
    ("expert_act", "i"), ("swiglu_alpha", "f"), ("swiglu_limit", "f"),
    ("reserved", "192s"), ("header_crc", "I"),
]
HEADER_STRUCT = struct.Struct("<" + "".join(code for _, code in HEADER_FIELDS))
assert HEADER_STRUCT.size == HEADER_SIZE, HEADER_STRUCT.size
HEADER_CRC_SPAN = HEADER_SIZE - 4   # header_crc = crc32(header[0:508])

MATRIX_STRUCT = struct.Struct("<iiiiqqqq")   # dtype rows cols scale_count data_off data_bytes scale_off zero_off
ENTRY_FIELDS = [
    ("name", "128s"), ("kind", "H"), ("dtype", "H"), ("layer", "i"), ("expert", "i"),
    ("ndim", "I"), ("shape", "4q"), ("offset", "Q"), ("nbytes", "Q"), ("crc32", "I"),
    ("reserved0", "i"), ("gate", "48s"), ("up", "48s"), ("down", "48s"),
    ("bias_offsets", "3q"), ("reserved1", "16s"),
]
ENTRY_STRUCT = struct.Struct("<" + "".join(code for _, code in ENTRY_FIELDS))
assert ENTRY_STRUCT.size == ENTRY_SIZE, ENTRY_STRUCT.size

# Entry kinds
KIND_TENSOR, KIND_EXPERT, KIND_SHARED, KIND_ROUTER, KIND_BIAS, KIND_SHARED_GATE = range(6)
# Whole-model entries: a dense matrix (attention projections, lm_head) encoded like an expert matrix,
# its one MatrixLayout in the entry's `gate` slot; a dense SwiGLU MLP layer as an expert blob.
KIND_MATRIX, KIND_DENSE_MLP = 6, 7
KIND_NAMES = {KIND_TENSOR: "tensor", KIND_EXPERT: "expert", KIND_SHARED: "shared_expert",
              KIND_ROUTER: "router", KIND_BIAS: "correction_bias", KIND_SHARED_GATE: "shared_gate",
              KIND_MATRIX: "matrix", KIND_DENSE_MLP: "dense_mlp"}
BLOB_KINDS = (KIND_EXPERT, KIND_SHARED, KIND_MATRIX, KIND_DENSE_MLP)
NAMED_KINDS = (KIND_TENSOR, KIND_MATRIX)   # found by name (layer -1); every other kind by (kind, layer, expert)
MOE_KINDS = (KIND_EXPERT, KIND_SHARED, KIND_ROUTER, KIND_BIAS, KIND_SHARED_GATE)   # layer must be a MoE layer

# Storage dtypes of table entries (blobs are U8; their matrices carry cb_dtype codes)
DTYPES = {0: "float32", 1: "float16", 2: "bfloat16", 3: "int8", 4: "uint8",
          5: "int16", 6: "int32", 7: "int64", 8: "float64", 9: "bool"}
DTYPE_CODES = {v: k for k, v in DTYPES.items()}
DTYPE_SIZES = {0: 4, 1: 2, 2: 2, 3: 1, 4: 1, 5: 2, 6: 4, 7: 8, 8: 8, 9: 1}
# safetensors dtype strings -> storage dtype code
SAFETENSORS_DTYPES = {"F32": 0, "F16": 1, "BF16": 2, "I8": 3, "U8": 4, "I16": 5,
                      "I32": 6, "I64": 7, "F64": 8, "BOOL": 9}

def crc32(data, value=0):
    """CRC-32 (IEEE, zlib polynomial) of a bytes-like object, chainable."""
    return zlib.crc32(data, value) & 0xFFFFFFFF


def align_up(n, a):
    return (n + a - 1) // a * a


def pack_matrix(m):
    if m is None:
        return b"\0" * MATRIX_STRUCT.size
    return MATRIX_STRUCT.pack(m.dtype, m.rows, m.cols, m.scale_count, m.data_offset,
                              m.data_bytes, m.scale_offset, m.zero_offset)


def unpack_matrix(raw):
    dtype, rows, cols, count, doff, dbytes, soff, zoff = MATRIX_STRUCT.unpack(raw)
    return MatrixLayout(dtype=dtype, rows=rows, cols=cols, data_offset=doff, data_bytes=dbytes,
                        scale_offset=soff, scale_count=count, zero_offset=zoff)


@dataclass
class Entry:
    """One tensor-table row, as Python sees it."""
    name: str
    kind: int
    dtype: int
    layer: int
    expert: int
    shape: tuple
    offset: int
    nbytes: int
    crc32: int
    matrices: tuple = None    # (gate, up, down) MatrixLayout for blob kinds
    biases: tuple = None      # expert blobs: blob offsets of the float32 gate/up/down biases (stored 0 = none)

    def pack(self):
        raw_name = self.name.encode("utf-8")
        if len(raw_name) >= NAME_BYTES:
            raise ValueError(f"tensor name longer than {NAME_BYTES - 1} bytes: {self.name!r}")
        if len(self.shape) > MAX_NDIM:
            raise ValueError(f"tensor {self.name!r} has {len(self.shape)} dims; the format stores <= {MAX_NDIM}")
        shape = list(self.shape) + [0] * (MAX_NDIM - len(self.shape))
        mats = self.matrices or (None, None, None)
        return ENTRY_STRUCT.pack(raw_name, self.kind, self.dtype, self.layer, self.expert,
                                 len(self.shape), *shape, self.offset, self.nbytes, self.crc32, 0,
                                 pack_matrix(mats[0]), pack_matrix(mats[1]), pack_matrix(mats[2]),
                                 *(self.biases or (0, 0, 0)), b"")

    @classmethod
    def unpack(cls, raw):
        f = ENTRY_STRUCT.unpack(raw)
        name, kind, dtype, layer, expert, ndim = f[0:6]
        shape, (offset, nbytes, crc) = f[6:10], f[10:13]
        mats = tuple(unpack_matrix(r) for r in f[14:17]) if kind in BLOB_KINDS else None
        biases = tuple(f[17:20]) if any(f[17:20]) else None
        if ndim > MAX_NDIM:
            raise ValueError(f"ndim {ndim} > {MAX_NDIM}")
        return cls(name.split(b"\0", 1)[0].decode("utf-8", "replace"), kind, dtype, layer, expert,
                   tuple(shape[:ndim]), offset, nbytes, crc, mats, biases)


def moe_mask_bytes(layers):
    mask = bytearray(MAX_LAYERS // 8)
    for layer in layers:
        mask[layer // 8] |= 1 << (layer % 8)
    return bytes(mask)


def moe_mask_layers(mask, n_layers):
    return [i for i in range(min(n_layers, MAX_LAYERS)) if mask[i // 8] >> (i % 8) & 1]


def pack_header(fields):
    """fields: dict of HEADER_FIELDS names (header_crc, reserved, magic, sizes filled here)."""
    values = dict(fields, magic=MAGIC, header_size=HEADER_SIZE, entry_size=ENTRY_SIZE,
                  reserved=b"", header_crc=0)
    values.setdefault("version", VERSION)
    values.setdefault("flags", 0)
    for key in ("family", "scheme"):
        values[key] = values[key].encode("ascii") if isinstance(values[key], str) else values[key]
    raw = bytearray(HEADER_STRUCT.pack(*(values[name] for name, _ in HEADER_FIELDS)))
    struct.pack_into("<I", raw, HEADER_CRC_SPAN, crc32(raw[:HEADER_CRC_SPAN]))
    return bytes(raw)


def unpack_header(raw):
    """bytes(512) -> dict; strings decoded, no validation (reader.py validates)."""
    values = dict(zip((name for name, _ in HEADER_FIELDS), HEADER_STRUCT.unpack(raw[:HEADER_SIZE])))
    for key in ("family", "scheme"):
        values[key] = values[key].split(b"\0", 1)[0].decode("ascii", "replace")   # C string
    values["computed_crc"] = crc32(raw[:HEADER_CRC_SPAN])
    return values
