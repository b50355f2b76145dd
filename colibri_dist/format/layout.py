"""Byte layout of one expert blob: where gate, up and down (and their scales) sit.

Role in the data flow: the contract between the quantizers/writer (which pack a
blob), the container (which stores it 4096-aligned), the store (which copies or
maps it as opaque bytes) and the native bridge (which turns bytes + layout into
a cb_expert). All offsets are relative to the blob start, so any copy of the
blob (mmap view, RAM cache buffer, spill file read, Ray object) is usable as is.
"""
from dataclasses import dataclass, field

# Scheme names (user facing, CLI --experts) <-> cb_dtype codes, group sizes: the C table (encodings.py)
from ..encodings import DTYPE_NAMES, GROUP_SIZE, SCHEMES  # noqa: F401  (re-exported)
BLOB_ALIGN = 4096      # each expert blob starts on this boundary in the container
PART_ALIGN = 64        # each part inside a blob starts on this boundary


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


@dataclass(frozen=True)
class ExpertLayout:
    """gate/up: [inter, hidden]; down: [hidden, inter]."""
    gate: MatrixLayout
    up: MatrixLayout
    down: MatrixLayout
    nbytes: int           # total blob size (a multiple of PART_ALIGN)
    scheme: str = field(default="f32")

    @property
    def hidden(self):
        return self.gate.cols

    @property
    def inter(self):
        return self.gate.rows
