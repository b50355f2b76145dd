"""ExpertView: an expert blob (any buffer) + its ExpertLayout (biases, activation), as a cb_expert for C.

Role: the store hands out blobs as mmap views, RAM copies, spill reads or Ray
objects; expert_view() wraps any of them without copying (the view keeps the
buffer alive) and checks the layout fits inside the buffer.
"""
import numpy as np

from ..errors import InvalidArgument
from ..encodings import encoding
from ..format.layout import ACTIVATIONS, ExpertLayout, MatrixLayout
from ._lib import ffi


def _check_matrix(m, nbytes, name):
    enc = encoding(m.dtype)
    if enc is None:
        raise InvalidArgument(f"{name}: unknown dtype code {m.dtype}")
    need = enc.data_bytes(m.rows, m.cols)
    if need < 0 and m.rows % enc.row_group:
        raise InvalidArgument(f"{name}: {enc.name} stores rows in groups of {enc.row_group}, got {m.rows}x{m.cols}")
    if need < 0:
        raise InvalidArgument(f"{name}: {enc.name} needs cols a multiple of {enc.group} (whole blocks), "
                              f"got {m.rows}x{m.cols}")
    if m.data_bytes != need or m.data_offset < 0 or m.data_offset + need > nbytes:
        raise InvalidArgument(f"{name}: data [{m.data_offset}, +{m.data_bytes}) does not fit {m.rows}x{m.cols} "
                              f"in a {nbytes}-byte blob")
    if enc.has_scale_array:
        count = enc.scale_count(m.rows, m.cols)
        if m.scale_count != count or m.scale_offset < 0 or m.scale_offset + 4 * count > nbytes or m.scale_offset % 4:
            raise InvalidArgument(f"{name}: scales (offset {m.scale_offset}, count {m.scale_count}) invalid, "
                                  f"expected {count} inside {nbytes} bytes")
    if enc.zero_point and (m.zero_offset < 0 or m.zero_offset + 4 > nbytes or m.zero_offset % 4):
        raise InvalidArgument(f"{name}: zero point offset {m.zero_offset} invalid")
    if not enc.is_int and m.data_offset % (enc.bits // 8):
        raise InvalidArgument(f"{name}: data offset {m.data_offset} misaligned")


def _check_biases(layout, nbytes):
    act = layout.act
    if act.kind not in ACTIVATIONS:
        raise InvalidArgument(f"expert activation {act.kind!r} unknown; expected one of {sorted(ACTIVATIONS)}")
    if act.kind == "swiglu_oai" and not (np.isfinite(act.alpha) and np.isfinite(act.limit) and act.limit > 0):
        raise InvalidArgument(f"swiglu_oai needs a finite alpha and a finite limit > 0, got {act.alpha}, {act.limit}")
    if layout.biases is None:
        return
    if len(layout.biases) != 3:
        raise InvalidArgument(f"expert biases: expected 3 offsets (gate, up, down), got {layout.biases!r}")
    for name, off, n in zip(("gate", "up", "down"), layout.biases, (layout.inter, layout.inter, layout.hidden)):
        if off <= 0 or off % 4 or off + 4 * n > nbytes:
            raise InvalidArgument(f"{name} bias [{off}, +{4 * n}) does not fit a {nbytes}-byte blob")


class ExpertView:
    """One expert ready for the kernels. `.c` is the cb_expert *, valid while the view lives."""

    def __init__(self, buffer, layout):
        if not isinstance(layout, ExpertLayout):
            raise InvalidArgument(f"expert_view needs an ExpertLayout, got {type(layout).__name__}")
        arr = np.frombuffer(buffer, dtype=np.uint8) if not isinstance(buffer, np.ndarray) else buffer
        if arr.dtype != np.uint8 or arr.ndim != 1 or not arr.flags.c_contiguous:
            raise InvalidArgument(f"expert blob must be a 1-D C-contiguous uint8 buffer, got {arr.dtype} {arr.shape}")
        if arr.size < layout.nbytes:
            raise InvalidArgument(f"expert blob has {arr.size} bytes, layout needs {layout.nbytes}")
        if arr.ctypes.data % 4:
            arr = np.array(arr, copy=True)       # aligned copy: the kernels read f32/f16 words and f32 scales
        for name in ("gate", "up", "down"):
            _check_matrix(getattr(layout, name), arr.size, name)
        if (layout.up.rows, layout.up.cols) != (layout.inter, layout.hidden) or \
                (layout.down.rows, layout.down.cols) != (layout.hidden, layout.inter):
            raise InvalidArgument("expert layout shapes disagree: gate/up [inter, hidden], down [hidden, inter]")
        _check_biases(layout, arr.size)
        self.buffer, self.layout = arr, layout
        self._base = ffi.from_buffer("uint8_t[]", arr)
        self.c = ffi.new("cb_expert *")
        for name in ("gate", "up", "down"):
            self._fill(getattr(self.c, name), getattr(layout, name))
        if layout.biases is not None:
            self.c.gate_bias, self.c.up_bias, self.c.down_bias = (
                ffi.cast("const float *", self._base + off) for off in layout.biases)
        self.c.act, self.c.alpha, self.c.limit = ACTIVATIONS[layout.act.kind], layout.act.alpha, layout.act.limit

    def _fill(self, cm, m: MatrixLayout):
        cm.data = self._base + m.data_offset
        cm.scales = ffi.cast("const float *", self._base + m.scale_offset) if m.scale_offset >= 0 else ffi.NULL
        cm.zero = ffi.cast("const int32_t *", self._base + m.zero_offset) if m.zero_offset >= 0 else ffi.NULL
        cm.dtype, cm.rows, cm.cols = m.dtype, m.rows, m.cols

    @property
    def hidden(self):
        return self.layout.hidden

    @property
    def inter(self):
        return self.layout.inter

    @property
    def nbytes(self):
        return self.layout.nbytes


def expert_view(buffer, layout):
    """Wrap a blob (bytes-like or uint8 array) and its ExpertLayout; no copy unless the buffer start is not 4-byte aligned."""
    return ExpertView(buffer, layout)
