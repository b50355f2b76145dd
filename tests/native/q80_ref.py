"""numpy reference of the 32-block x Q8_0 / Q8_1 products (docs/KERNELS.md "Q8_0 x Q8_0"), exact to the bit.

quantize_q80 is ggml-cpu's x86 quantize_row_q8_0 (per 32 inputs: amax = max |x|, d = f16(amax / 127) (numpy's
float16 cast: round to nearest even), id = 127 / amax (0 when amax = 0), q = rint(x * id)); a short last block is the
zero-padded block's; quantize_q81 adds quantize_row_q8_1's s = f16(f32(amax / 127) * sum q). q80_matmul: per output
(t, r) and block b in order, the integer sum I = sum w * a (int64; q5_0's w = q - 16 and q5_1's w = q with q's 5th bit
from qh, as gguf.quants unpacks them; mxfp4 / iq4_nl: gguf.quants' kvalues of the nibble), then s = fma(dw * da, I, s),
dw the weight block's f16 d (mxfp4: gguf's e8m0_to_fp32_half(e)), and for q5_1 s = fma(m, sa, s), as
ggml_vec_dot_q5_0_q8_0 / _mxfp4_q8_0 / _iq4_nl_q8_0 add their blocks; q8_0 and q5_1 in ggml_vec_dot_q8_0_q8_0's
/ _q5_1_q8_1's own order: 8 lanes of 4-code sums, acc_l = fma(dw * da, lane_l, acc_l) per block, then
((acc4 + acc0) + (acc6 + acc2)) + ((acc5 + acc1) + (acc7 + acc3)), q5_1 plus its ms = fma(m, sa, ms) last.
"""
import numpy as np

from w4a8_ref import fma32, hsum8

QK = 32
BLOCK_BYTES = {"q8_0": 34, "q5_0": 22, "q5_1": 24, "mxfp4": 17, "iq4_nl": 18}


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


def quantize_q81(x):
    """x float32 [n, K] -> (qs, d, s float32 [n, nb]): quantize_q80's codes and d, and Q8_1's s."""
    x = np.asarray(x, np.float32)
    q, d = quantize_q80(x)
    n, K = x.shape
    xb = np.zeros((n, q.shape[1] * QK), np.float32)
    xb[:, :K] = x
    amax = np.abs(xb.reshape(n, -1, QK)).max(axis=2)
    d32 = (amax / np.float32(127)).astype(np.float32)
    s = (d32 * q.sum(axis=2).astype(np.float32)).astype(np.float32).astype(np.float16).astype(np.float32)
    return q, d, s


def _nibbles(qs):
    """[..., 16] bytes -> [..., 32] nibbles: the low ones, then the high ones (element j < 16: low nibble of byte j)."""
    qs = qs.astype(np.int64)
    return np.concatenate([qs & 15, qs >> 4], axis=-1)


def q80_parts(raw, rows, nb, scheme="q8_0"):
    """uint8 [rows, nb * block bytes] -> (integer codes int64 [rows, nb, 32], dw float32 [rows, nb], q5_1's m (else
    None))."""
    blocks = np.asarray(raw, np.uint8).reshape(rows, nb, BLOCK_BYTES[scheme])
    half = lambda o: blocks[:, :, o:o + 2].copy().view(np.float16).astype(np.float32)[..., 0]
    if scheme == "q8_0":
        return blocks[:, :, 2:].view(np.int8).astype(np.int64), half(0), None
    if scheme in ("mxfp4", "iq4_nl"):
        import gguf
        quant = gguf.quants.MXFP4 if scheme == "mxfp4" else gguf.quants.IQ4_NL
        kv = np.asarray(quant.kvalues, np.int64)
        if scheme == "mxfp4":
            return kv[_nibbles(blocks[:, :, 1:])], quant.e8m0_to_fp32_half(blocks[:, :, 0].astype(np.uint32)), None
        return kv[_nibbles(blocks[:, :, 2:])], half(0), None
    o = 2 if scheme == "q5_0" else 4
    qh = blocks[:, :, o:o + 4].copy().view("<u4").astype(np.int64)                       # [rows, nb, 1]
    q = _nibbles(blocks[:, :, o + 4:o + 20]) + 16 * ((qh >> np.arange(32)) & 1)
    return (q - 16, half(0), None) if scheme == "q5_0" else (q, half(0), half(2))


def parts_dequantize(codes, dw, m):
    """The weights [rows, nb * 32] from q80_parts, in ggml's dequantize order (q5_1: d * q + m)."""
    w = (codes.astype(np.float32) * dw[..., None]).astype(np.float32)
    return (w if m is None else (w + m[..., None]).astype(np.float32)).reshape(codes.shape[0], -1)


def q80_matmul(x, raw, rows, cols, scheme="q8_0"):
    """out [n, rows] float32 of x [n, cols] times the matrix of blocks raw [rows, row bytes] (scheme's)."""
    nb = -(-cols // QK)
    codes, dw, m = q80_parts(raw, rows, nb, scheme)
    qa, da, sa = quantize_q81(x)
    if scheme in ("q8_0", "q5_1"):
        return _lanes(codes, dw, m, qa, da, sa)
    s = np.zeros((qa.shape[0], rows), np.float32)
    for b in range(nb):
        I = (qa[:, b, :] @ codes[:, b, :].T)                                  # [n, rows], exact in int64
        dd = (dw[None, :, b] * da[:, b, None]).astype(np.float32)
        s = fma32(dd, I.astype(np.float32), s)
        if m is not None:
            s = fma32(np.broadcast_to(m[None, :, b], s.shape), np.broadcast_to(sa[:, b, None], s.shape), s)
    return s


def _lanes(codes, dw, m, qa, da, sa):
    """q8_0's and q5_1's products in ggml's lane order (module doc); q5_1's m * s in their own sum, added last."""
    n, rows, nb = qa.shape[0], codes.shape[0], codes.shape[1]
    acc = np.zeros((8, n, rows), np.float32)
    ms = np.zeros((n, rows), np.float32)
    for b in range(nb):
        dd = (dw[None, :, b] * da[:, b, None]).astype(np.float32)
        for lane in range(8):
            k = slice(4 * lane, 4 * lane + 4)
            acc[lane] = fma32(dd, (qa[:, b, k] @ codes[:, b, k].T).astype(np.float32), acc[lane])
        if m is not None:
            ms = fma32(np.broadcast_to(m[None, :, b], ms.shape), np.broadcast_to(sa[:, b, None], ms.shape), ms)
    return hsum8(acc) if m is None else (hsum8(acc) + ms).astype(np.float32)


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
