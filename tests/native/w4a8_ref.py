"""numpy reference of the w4a8 integer arithmetic (docs/KERNELS.md "w4a8"), exact to the bit.

Activations: the w8a8 per-token quantization (amax, rint(x * (127/amax)) clamped, sx = amax/127).
Per output (t, r) and 64-element block b: int32 lane sums p_b[l] of code * q over the block's
k with lane = (k % 64) // 8; a[l] = fma(p_b[l], s, a[l]) with s the scale of the lane's group
(int4-g64: group b; int4-g32: group 2b + l // 4, 0 past the last group), blocks in order;
out = (((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))) * sx[t]. The single-rounding fma is emulated
in float64 (the product is exact there) with an exact TwoSum error term for the midpoint cases.
"""
import numpy as np

from colibri_dist.format.layout import GROUP_SIZE


def quantize_rows(x):
    x = np.asarray(x, np.float32)
    amax = np.abs(x).max(axis=1).astype(np.float32)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.clip(np.rint((x * inv[:, None]).astype(np.float32)), -127, 127).astype(np.int64)
    return q, (amax / np.float32(127)).astype(np.float32)


def fma32(a, b, c):
    """float32 fma(a, b, c) with one rounding, for a * b exact in float64."""
    prod = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = prod + c64
    bb = s - prod
    err = (prod - (s - bb)) + (c64 - bb)
    r = s.astype(np.float32)
    r64 = r.astype(np.float64)
    toward = np.nextafter(r, np.where(s > r64, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
    mid = (r64 + toward.astype(np.float64)) / 2
    fix = (err != 0) & (r64 != s) & (mid == s)            # s is a float32 midpoint: err decides
    up = np.maximum(r, toward)
    down = np.minimum(r, toward)
    return np.where(fix, np.where(err > 0, up, down), r).astype(np.float32)


def hsum8(acc):
    """ggml's hsum_float_8 of 8 float32 lanes acc[0..7] (arrays of any shape), in its order:
    ((acc4 + acc0) + (acc6 + acc2)) + ((acc5 + acc1) + (acc7 + acc3)), each add rounded to float32."""
    f = np.float32
    return (((acc[4] + acc[0]).astype(f) + (acc[6] + acc[2]).astype(f)).astype(f)
            + ((acc[5] + acc[1]).astype(f) + (acc[7] + acc[3]).astype(f)).astype(f)).astype(f)


def int4_parts(view):
    """(codes int64 [rows, cols], scales float32 [rows, groups], group size) of an int4 MatrixView."""
    lay, buf = view.layout, view.buffer
    rows, cols = lay.rows, lay.cols
    rb = (cols + 1) // 2
    raw = buf[lay.data_offset:lay.data_offset + rows * rb].reshape(rows, rb)
    nib = np.stack([raw & 15, raw >> 4], axis=2).reshape(rows, 2 * rb)[:, :cols].astype(np.int64)
    codes = np.where(nib >= 8, nib - 16, nib)
    g = GROUP_SIZE[lay.dtype]
    ng = -(-cols // g)
    scales = buf[lay.scale_offset:lay.scale_offset + 4 * rows * ng].view(np.float32).reshape(rows, ng)
    return codes, scales, g


def w4a8_matmul(x, view):
    """out [n, rows] of the w4a8 product of x [n, cols] with the int4 matrix `view`."""
    codes, scales, G = int4_parts(view)
    q, sx = quantize_rows(x)
    rows, cols = codes.shape
    ng = scales.shape[1]
    nb = -(-cols // 64)
    a = np.zeros((q.shape[0], rows, 8), np.float32)
    for b in range(nb):
        ks = np.arange(64 * b, min(64 * b + 64, cols))
        p = np.zeros((q.shape[0], rows, 8), np.int64)
        for l in range(8):
            kl = ks[(ks % 64) // 8 == l]
            p[:, :, l] = q[:, kl] @ codes[:, kl].T
        g = np.array([b if G == 64 else 2 * b + l // 4 for l in range(8)])
        s = np.where(g < ng, scales[:, np.minimum(g, ng - 1)], np.float32(0)).astype(np.float32)   # [rows, 8]
        a = fma32(p.astype(np.float32), np.broadcast_to(s[None], a.shape), a)
    s = ((a[..., 0] + a[..., 4]) + (a[..., 2] + a[..., 6])) + ((a[..., 1] + a[..., 5]) + (a[..., 3] + a[..., 7]))
    return (s * sx[:, None]).astype(np.float32)
