"""MatrixView: one weight matrix (any buffer + MatrixLayout) as a cb_matrix for the dense kernels.

Role: the whole-model path's counterpart of views.ExpertView. Attention and
dense-MLP projections, embeddings and the LM head come from the container as
blobs (mmap views, RAM copies) plus a MatrixLayout whose offsets are relative
to the buffer start; matrix_view() wraps them without copying (the view keeps
the buffer alive), matrix_from_array() wraps a float32 numpy matrix,
quantized_matrix() quantizes one (format.quantize) into a fresh blob and
split_rows() views equal row ranges of one in place (MLA's per-head stacks).
"""
import numpy as np

from ..errors import InvalidArgument
from ..format.layout import PART_ALIGN, SCHEMES, MatrixLayout, row_range
from ..format.quantize import quantize_matrix
from ._lib import ffi
from .views import _check_matrix


class MatrixView:
    """`.c` is the cb_matrix *, valid while the view lives; rows, cols, dtype, layout, buffer."""

    def __init__(self, buffer, layout):
        if not isinstance(layout, MatrixLayout):
            raise InvalidArgument(f"matrix_view needs a MatrixLayout, got {type(layout).__name__}")
        arr = buffer if isinstance(buffer, np.ndarray) else np.frombuffer(buffer, dtype=np.uint8)
        if arr.dtype != np.uint8 or arr.ndim != 1 or not arr.flags.c_contiguous:
            raise InvalidArgument(f"matrix buffer must be a 1-D C-contiguous uint8 buffer, got {arr.dtype} {arr.shape}")
        if arr.ctypes.data % 4:
            arr = np.array(arr, copy=True)       # aligned copy: the kernels read f32/f16 words and f32 scales
        if layout.rows <= 0 or layout.cols <= 0:
            raise InvalidArgument(f"matrix layout shape [{layout.rows}, {layout.cols}] is empty")
        _check_matrix(layout, arr.size, "matrix")
        self.buffer, self.layout = arr, layout
        self._base = ffi.from_buffer("uint8_t[]", arr)
        c = self.c = ffi.new("cb_matrix *")
        c.data = self._base + layout.data_offset
        c.scales = ffi.cast("const float *", self._base + layout.scale_offset) if layout.scale_offset >= 0 else ffi.NULL
        c.zero = ffi.cast("const int32_t *", self._base + layout.zero_offset) if layout.zero_offset >= 0 else ffi.NULL
        c.dtype, c.rows, c.cols = layout.dtype, layout.rows, layout.cols

    rows = property(lambda self: self.layout.rows)
    cols = property(lambda self: self.layout.cols)
    dtype = property(lambda self: self.layout.dtype)

    def __repr__(self):
        return f"MatrixView(dtype={self.dtype}, rows={self.rows}, cols={self.cols})"


def matrix_view(buffer, layout):
    """Wrap a buffer (bytes-like or uint8 array) and a MatrixLayout; no copy unless misaligned."""
    return MatrixView(buffer, layout)


def split_rows(view, parts):
    """`parts` MatrixViews of equal row ranges of `view` over its own buffer (no copy, the same encoding)."""
    if not isinstance(view, MatrixView):
        raise InvalidArgument(f"split_rows needs a MatrixView, got {type(view).__name__}")
    if parts <= 0 or view.rows % parts:
        raise InvalidArgument(f"a matrix of {view.rows} rows cannot be split into {parts} equal parts")
    step = view.rows // parts
    return [MatrixView(view.buffer, row_range(view.layout, i * step, (i + 1) * step)) for i in range(parts)]


def matrix_from_array(a):
    """float32 2-D array (copied to C order if needed) as a CB_F32 MatrixView."""
    a = np.asarray(a)
    if a.dtype != np.float32 or a.ndim != 2 or a.size == 0:
        raise InvalidArgument(f"matrix_from_array needs a non-empty 2-D float32 array, got {a.dtype} {a.shape}")
    a = np.ascontiguousarray(a)
    layout = MatrixLayout(0, a.shape[0], a.shape[1], 0, a.nbytes)
    return MatrixView(a.reshape(-1).view(np.uint8), layout)


def quantized_matrix(w, scheme):
    """float 2-D array -> MatrixView of its `scheme` encoding (data, scales, zero point in one blob)."""
    data, scales, zero = quantize_matrix(w, scheme)
    parts, offsets, end = [data, scales, zero], [], 0
    for p in parts:
        offsets.append(end if p is not None else -1)
        end += 0 if p is None else -(-p.nbytes // PART_ALIGN) * PART_ALIGN
    blob = np.zeros(max(end, PART_ALIGN), dtype=np.uint8)
    for p, off in zip(parts, offsets):
        if p is not None:
            blob[off:off + p.nbytes] = np.ascontiguousarray(p).reshape(-1).view(np.uint8)
    rows, cols = np.shape(w)                     # data may pack several codes per byte: shape from w
    layout = MatrixLayout(SCHEMES[scheme], rows, cols, 0, data.nbytes, offsets[1],
                          0 if scales is None else scales.size, offsets[2])
    return MatrixView(blob, layout)
