"""llama.cpp's 5-bit block encodings Q5_0 and Q5_1: the reference quantizers and the exact dequantizers.

Role in the data flow: format/quantize.py's quantize_matrix / dequantize for the `q5_0` and `q5_1` encodings
(native/src/q5quants.h reads the same bytes). llama-quantize falls back to these blocks for rows not made of
256-element super-blocks (GLM-4.5-Air's 1408-wide expert rows: Q4_K -> Q5_0), and a GGUF's blocks are copied as
they are (Encoded); the quantizers are ggml's quantize_row_q5_0_ref / _q5_1_ref (Q5_0: d = max / -16 of the element
of largest magnitude, q = min(31, trunc(x / d + 16.5)); Q5_1: d = (max - min) / 31, m = min, q = trunc((x - m) / d
+ 0.5)). Block of 32: f16 d (Q5_1: then f16 m), qh (uint32, bit j: element j's 5th bit), 16 bytes of low nibbles
(element j < 16 the low nibble of byte j, j >= 16 the high nibble of byte j - 16). The dequantizers compute
gguf.quants' float32 operations in its order ((q - 16) * d; q * d + m, the product rounded first), so they equal
gguf.quants.dequantize bit for bit.
"""
import numpy as np

from ..errors import InvalidArgument

GROUP = 32
BLOCK_BYTES = {"q5_0": 22, "q5_1": 24}


def _blocks(w, scheme):
    rows, cols = w.shape
    if cols % GROUP:
        raise InvalidArgument(f"{scheme} needs cols a multiple of {GROUP} (llama.cpp's blocks), "
                              f"got a [{rows}, {cols}] matrix")
    return np.asarray(w, np.float32).reshape(-1, GROUP)


def _half(x, scheme):
    h = np.asarray(x, np.float32).astype(np.float16)
    if not np.isfinite(h).all():
        raise InvalidArgument(f"{scheme}: a block scale does not fit float16")
    return h.reshape(-1, 1).view(np.uint8)


def _inverse(d):
    with np.errstate(divide="ignore"):
        return np.where(d == 0, np.float32(0), np.float32(1) / np.where(d == 0, np.float32(1), d)).astype(np.float32)


def _pack(q, rows):
    """codes uint8 [n, 32] (0..31) -> qh bytes [n, 4] and nibble bytes [n, 16]."""
    q = q.astype(np.uint32)
    qh = ((q >> 4) & 1) << np.arange(32, dtype=np.uint32)
    qh = np.bitwise_or.reduce(qh, axis=1).astype("<u4").reshape(-1, 1).view(np.uint8)
    lo = (q & 15).astype(np.uint8)
    return qh, lo[:, :16] | (lo[:, 16:] << 4)


def quantize_q5_0(w):
    """float32 [rows, cols] -> uint8 [rows, cols / 32 * 22] (ggml's quantize_row_q5_0_ref)."""
    x = _blocks(w, "q5_0")
    mx = np.take_along_axis(x, np.abs(x).argmax(axis=1)[:, None], axis=1)[:, 0]
    d = (mx / np.float32(-16)).astype(np.float32)
    t = (x * _inverse(d)[:, None] + np.float32(16.5)).astype(np.float32)
    q = np.minimum(np.trunc(t), 31).astype(np.uint8)
    qh, qs = _pack(q, w.shape[0])
    return np.concatenate([_half(d, "q5_0"), qh, qs], axis=1).reshape(w.shape[0], -1)


def quantize_q5_1(w):
    """float32 [rows, cols] -> uint8 [rows, cols / 32 * 24] (ggml's quantize_row_q5_1_ref)."""
    x = _blocks(w, "q5_1")
    lo, hi = x.min(axis=1), x.max(axis=1)
    d = ((hi - lo) / np.float32(31)).astype(np.float32)
    t = ((x - lo[:, None]) * _inverse(d)[:, None] + np.float32(0.5)).astype(np.float32)
    q = np.minimum(np.trunc(t), 31).astype(np.uint8)
    qh, qs = _pack(q, w.shape[0])
    return np.concatenate([_half(d, "q5_1"), _half(lo, "q5_1"), qh, qs], axis=1).reshape(w.shape[0], -1)


def _codes(blocks, qh_at):
    qh = blocks[:, qh_at:qh_at + 4].copy().view("<u4").astype(np.uint32)
    hi = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
    qs = blocks[:, qh_at + 4:qh_at + 20]
    return np.concatenate([qs & 15, qs >> 4], axis=1) | (hi << 4)


def _f16(blocks, o):
    return blocks[:, o:o + 2].copy().view(np.float16).astype(np.float32)


def dequantize_q5_0(raw, rows, cols):
    """uint8 Q5_0 blocks of a [rows, cols] matrix -> float32, gguf.quants' values bit for bit."""
    b = np.asarray(raw, np.uint8).reshape(-1, 22)
    q = _codes(b, 2).astype(np.int8) - np.int8(16)
    return (_f16(b, 0) * q.astype(np.float32)).astype(np.float32).reshape(rows, cols)


def dequantize_q5_1(raw, rows, cols):
    """uint8 Q5_1 blocks of a [rows, cols] matrix -> float32, gguf.quants' values bit for bit."""
    b = np.asarray(raw, np.uint8).reshape(-1, 24)
    return ((_f16(b, 0) * _codes(b, 4).astype(np.float32)) + _f16(b, 2)).astype(np.float32).reshape(rows, cols)


QUANTIZE = {"q5_0": quantize_q5_0, "q5_1": quantize_q5_1}
DEQUANTIZE = {"q5_0": dequantize_q5_0, "q5_1": dequantize_q5_1}
