"""numpy references of the int6-g64 encoding and its two products, exact to the bit.

int6_parts: codes read bit by bit from the stored rows (colibri.h: code c at bits 6c .. 6c+5 of its row, bit i
of a row = bit i % 8 of byte i / 8, two's complement) and the group scales.
f32_matmul: the weight-only sequence of kernels.h on v(k) = float32(code * scale[r, k // 64]).
w6a8_matmul (docs/KERNELS.md "w6a8"): activations quantized per token as for w8a8; per output (t, r) and
64-element block b: int32 lane sums p_b[l] of code * q over the block's k with lane = (k % 32) // 4;
a[l] = fma(p_b[l], scale[r, b], a[l]), blocks in order; out = (((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))) * sx[t].
"""
import numpy as np

from w4a8_ref import fma32, quantize_rows


def int6_parts(view):
    """(codes int64 [rows, cols], scales float32 [rows, groups]) of an int6-g64 MatrixView."""
    lay, buf = view.layout, view.buffer
    rows, cols = lay.rows, lay.cols
    rb = (cols * 6 + 7) // 8
    raw = buf[lay.data_offset:lay.data_offset + rows * rb].reshape(rows, rb).astype(np.int64)
    bit = 6 * np.arange(cols)[:, None] + np.arange(6)[None, :]              # [cols, 6] bit positions
    bits = (raw[:, bit // 8] >> (bit % 8)) & 1                              # [rows, cols, 6]
    field = (bits << np.arange(6)).sum(axis=2)
    codes = np.where(field >= 32, field - 64, field)
    ng = -(-cols // 64)
    scales = buf[lay.scale_offset:lay.scale_offset + 4 * rows * ng].view(np.float32).reshape(rows, ng)
    return codes, scales


def _hsum8(a):
    return ((a[..., 0] + a[..., 4]) + (a[..., 2] + a[..., 6])) + ((a[..., 1] + a[..., 5]) + (a[..., 3] + a[..., 7]))


def f32_matmul(x, view):
    """out [n, rows] of the weight-only product (kernels.h's per-element sequence)."""
    codes, scales = int6_parts(view)
    rows, cols = codes.shape
    v = (codes.astype(np.float32) * np.repeat(scales, 64, axis=1)[:, :cols]).astype(np.float32)
    x = np.asarray(x, np.float32)
    k8 = cols - cols % 8
    a = np.zeros((x.shape[0], rows, 8), np.float32)
    for k in range(0, k8, 8):
        a = fma32(np.broadcast_to(v[None, :, k:k + 8], a.shape), np.broadcast_to(x[:, None, k:k + 8], a.shape), a)
    s = _hsum8(a)
    for k in range(k8, cols):
        s = fma32(np.broadcast_to(v[None, :, k], s.shape), np.broadcast_to(x[:, None, k], s.shape), s)
    return s.astype(np.float32)


def w6a8_matmul(x, view):
    """out [n, rows] of the w6a8 product of x [n, cols] with the int6-g64 matrix `view`."""
    codes, scales = int6_parts(view)
    q, sx = quantize_rows(x)
    rows, cols = codes.shape
    a = np.zeros((q.shape[0], rows, 8), np.float32)
    for b in range(-(-cols // 64)):
        ks = np.arange(64 * b, min(64 * b + 64, cols))
        p = np.zeros((q.shape[0], rows, 8), np.int64)
        for l in range(8):
            kl = ks[(ks % 32) // 4 == l]
            p[:, :, l] = q[:, kl] @ codes[:, kl].T
        s = np.broadcast_to(scales[None, :, b, None], a.shape)
        a = fma32(p.astype(np.float32), s, a)
    return (_hsum8(a) * sx[:, None]).astype(np.float32)
