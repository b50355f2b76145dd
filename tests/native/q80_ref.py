"""numpy reference of the Q8_0 / Q5_0 x Q8_0 product (docs/KERNELS.md "Q8_0 x Q8_0"), exact to the bit.

quantize_q80 is ggml-cpu's x86 quantize_row_q8_0 (per 32 inputs: amax = max |x|, d = f16(amax / 127) (numpy's
float16 cast: round to nearest even), id = 127 / amax (0 when amax = 0), q = rint(x * id)); a short last block is the
zero-padded block's. q80_matmul: per output (t, r) and block b in order, the integer sum I = sum w * a (int64; q5_0's
w = q - 16 with q's 5th bit from qh, as gguf.quants unpacks it), then s = fma(dw * da, I, s), dw the weight block's
f16 d, as ggml_vec_dot_q8_0_q8_0 / _q5_0_q8_0 add their blocks.
"""
import numpy as np

from w4a8_ref import fma32

QK = 32


def quantize_q80(x):
    """x float32 [n, K] -> (qs int64 [n, nb, 32], d float32 [n, nb]), nb = ceil(K / 32)."""
    x = np.asarray(x, np.float32)
    n, K = x.shape
    nb = -(-K // QK)
    xb = np.zeros((n, nb * QK), np.float32)
    xb[:, :K] = x
    xb = xb.reshape(n, nb, QK)
    amax = np.abs(xb).max(axis=2)
    d = (amax / np.float32(127)).astype(np.float32).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(amax == 0, np.float32(0), np.float32(127) / amax).astype(np.float32)
    q = np.rint((xb * idv[..., None]).astype(np.float32)).astype(np.int64)
    return q, d


def q80_parts(raw, rows, nb, scheme="q8_0"):
    """uint8 [rows, nb * 34 (q5_0: 22)] -> (signed codes int64 [rows, nb, 32], d float32 [rows, nb])."""
    blocks = np.asarray(raw, np.uint8).reshape(rows, nb, 34 if scheme == "q8_0" else 22)
    d = blocks[:, :, :2].copy().view(np.float16).astype(np.float32)[..., 0]
    if scheme == "q8_0":
        return blocks[:, :, 2:].view(np.int8).astype(np.int64), d
    qh = blocks[:, :, 2:6].copy().view("<u4").astype(np.int64)                       # [rows, nb, 1]
    hi = (qh >> np.arange(32)) & 1
    qs = blocks[:, :, 6:22].astype(np.int64)
    return np.concatenate([qs & 15, qs >> 4], axis=2) + 16 * hi - 16, d


def q80_matmul(x, raw, rows, cols, scheme="q8_0"):
    """out [n, rows] float32 of x [n, cols] times the q8_0 (q5_0) matrix of blocks raw [rows, row bytes]."""
    nb = -(-cols // QK)
    codes, dw = q80_parts(raw, rows, nb, scheme)
    qa, da = quantize_q80(x)
    s = np.zeros((qa.shape[0], rows), np.float32)
    for b in range(nb):
        I = (qa[:, b, :] @ codes[:, b, :].T)                                  # [n, rows], exact in int64
        dd = (dw[None, :, b] * da[:, b, None]).astype(np.float32)
        s = fma32(dd, I.astype(np.float32), s)
    return s


def quantization_bound(x, weights):
    """Per (t, r): sum over blocks of |da| / 2 * sum |w| over the block, plus the f16 rounding of d (|da| * 2^-11 *
    127 * sum |w|, loosely): how far Q8_0's activation rounding alone can move the product from weights @ x."""
    _, da = quantize_q80(x)
    rows, cols = weights.shape
    nb = da.shape[1]
    wpad = np.zeros((rows, nb * QK))
    wpad[:, :cols] = np.abs(np.asarray(weights, np.float64))
    wabs = wpad.reshape(rows, nb, QK).sum(axis=2)
    return (np.abs(da.astype(np.float64)) * (0.5 + 127 * 2.0 ** -10)) @ wabs.T
