"""Byte layout of one expert blob: where gate, up and down (their scales, their biases) sit.

Role in the data flow: the contract between the quantizers/writer (which pack a
blob), the container (which stores it 4096-aligned), the store (which copies or
maps it as opaque bytes) and the native bridge (which turns bytes + layout into
a cb_expert). All offsets are relative to the blob start, so any copy of the
blob (mmap view, RAM cache buffer, spill file read, Ray object) is usable as is.
"""
from dataclasses import dataclass, field, replace

# Scheme names (user facing, CLI --experts) <-> cb_dtype codes, group sizes: the C table (encodings.py)
from ..encodings import DTYPE_NAMES, ENCODINGS, GROUP_SIZE, SCALE_MATRIX, SCHEMES  # noqa: F401  (re-exported)
BLOB_ALIGN = 4096      # each expert blob starts on this boundary in the container
PART_ALIGN = 64        # each part inside a blob starts on this boundary
# The header's expert scheme when the expert matrices do not share one encoding (a GGUF import keeping each
# tensor's own: Q4_K gate/up with Q6_K down on some layers); each matrix's descriptor names its own cb_dtype.
MIXED, MIXED_CODE = "mixed", -1


def scheme_of(dtypes):
    """The scheme name of matrices with these cb_dtype codes: their one encoding's, else MIXED."""
    names = {DTYPE_NAMES[d] for d in dtypes}
    return names.pop() if len(names) == 1 else MIXED


@dataclass(frozen=True)
class MatrixLayout:
    """One matrix inside a blob. Offsets are bytes from the blob start; -1 = absent."""
    dtype: int            # cb_dtype code
    rows: int
    cols: int
    data_offset: int
    data_bytes: int
    scale_offset: int = -1
    scale_count: int = 0
    zero_offset: int = -1


def row_range(layout, r0, r1):
    """The layout of rows r0:r1 of a matrix in the same bytes: every encoding stores whole rows one after another
    (data, and per-row or per-group scales alike); a per-matrix scale and zero point are shared."""
    enc = ENCODINGS[layout.dtype]
    rows, cols = r1 - r0, layout.cols
    scale_offset = layout.scale_offset
    if scale_offset >= 0 and enc.scale_kind != SCALE_MATRIX:
        scale_offset += 4 * r0 * enc.scale_count(1, cols)
    return replace(layout, rows=rows, data_offset=layout.data_offset + r0 * enc.row_bytes(cols),
                   data_bytes=enc.data_bytes(rows, cols), scale_offset=scale_offset,
                   scale_count=enc.scale_count(rows, cols))


ACTIVATIONS = {"silu": 0, "swiglu_oai": 1}    # cb_act codes (colibri.h); the container header's expert_act


@dataclass(frozen=True)
class Activation:
    """An expert's gated activation (colibri.h cb_act): "silu" (SwiGLU) or "swiglu_oai" (gpt-oss's clamped
    SwiGLU: alpha, limit). Not stored in the blob: the container header holds it for every expert."""
    kind: str = "silu"
    alpha: float = 0.0
    limit: float = 0.0


SILU = Activation()


@dataclass(frozen=True)
class ExpertLayout:
    """gate/up: [inter, hidden]; down: [hidden, inter]; biases: None, or the blob offsets of the float32
    gate [inter], up [inter] and down [hidden] biases (gpt-oss)."""
    gate: MatrixLayout
    up: MatrixLayout
    down: MatrixLayout
    nbytes: int           # total blob size (a multiple of PART_ALIGN)
    scheme: str = field(default="f32")     # the three matrices' encoding, or MIXED when they differ
    biases: tuple = None
    act: Activation = SILU

    @property
    def schemes(self):
        """(gate, up, down) encoding names: what pack_expert takes to pack a blob of this layout."""
        return tuple(DTYPE_NAMES[m.dtype] for m in (self.gate, self.up, self.down))

    @property
    def hidden(self):
        return self.gate.cols

    @property
    def inter(self):
        return self.gate.rows
