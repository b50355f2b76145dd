"""llama.cpp's k-quant super-blocks (Q4_K, Q5_K, Q6_K): a reference quantizer and the exact dequantizer.

Role in the data flow: format/quantize.py's quantize_matrix / dequantize for the `q4_k`, `q5_k` and `q6_k`
encodings (native/src/kquants.h reads the same bytes). A GGUF's k-quant blocks are copied as they are
(Encoded); this quantizer exists so colibri can write the encodings from float weights (tests, convert
--experts q4_k). It is a plain min/max one, not llama.cpp's iterative search: its blocks are valid
Q4_K/Q6_K, their values a little less accurate than llama-quantize's. The dequantizers compute every value
with gguf.quants' float32 operations in its order (Q4_K, Q5_K: (d * sc) * q - dmin * m; Q6_K: (d * sc) * (q - 32)),
so they equal gguf.quants.dequantize bit for bit.
"""
import numpy as np

from ..errors import InvalidArgument

QK_K = 256
BLOCK_BYTES = {"q4_k": 144, "q5_k": 176, "q6_k": 210}


def _blocks(w, scheme):
    rows, cols = w.shape
    if cols % QK_K:
        raise InvalidArgument(f"{scheme} needs cols a multiple of {QK_K} (llama.cpp's super-blocks), "
                              f"got a [{rows}, {cols}] matrix")
    return np.asarray(w, np.float32).reshape(-1, QK_K)


def row_groups(layout, plain, group, rows, cols):
    """(groups, super-block columns) of a [rows, cols] matrix of `layout`, the `plain` encoding's blocks laid out
    `group` rows at a time (kquants_r8 / kquants_r16); other shapes are refused naming the layout."""
    if rows % group or cols % QK_K:
        raise InvalidArgument(f"{layout} needs rows a multiple of {group} and cols of {QK_K}, got a [{rows}, {cols}] "
                              f"matrix ({plain} keeps any row count)")
    return rows // group, cols // QK_K


def grouped_blocks(blocks, rows, cols, group, block):
    """Row-major blocks of a [rows, cols] matrix -> uint8 [group, super-block column, row in the group, block byte]."""
    return np.asarray(blocks, np.uint8).reshape(rows // group, group, cols // QK_K, block).transpose(0, 2, 1, 3)


def _half(x):
    """float32 -> (f16 bytes [n, 2], the f16 value back as float32)."""
    h = np.asarray(x, np.float32).astype(np.float16)
    return h.reshape(-1, 1).view(np.uint8), h.astype(np.float32)


def _safe_div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b == 0, np.float32(0), a / np.where(b == 0, np.float32(1), b)).astype(np.float32)


def _scale_min(x, levels):
    """Per sub-block of 32: (d, dmin bytes [n, 2] each, 12 packed scale bytes, codes uint8 [n, 8, 32] in
    [0, levels])."""
    n = x.shape[0]
    sub = x.reshape(n, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0).astype(np.float32)            # the sub-block's min (<= 0), stored as -m1
    scale = ((sub.max(axis=2) - lo) / np.float32(levels)).astype(np.float32)
    dbytes, d = _half(scale.max(axis=1) / np.float32(63))
    mbytes, dmin = _half((-lo).max(axis=1) / np.float32(63))
    sc = np.clip(np.rint(_safe_div(scale, d[:, None])), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(_safe_div(-lo, dmin[:, None])), 0, 63).astype(np.uint8)
    d1 = (d[:, None] * sc.astype(np.float32))[:, :, None]
    m1 = (dmin[:, None] * m.astype(np.float32))[:, :, None]
    q = np.clip(np.rint(_safe_div(sub + m1, np.broadcast_to(d1, sub.shape))), 0, levels).astype(np.uint8)
    packed = np.empty((n, 12), np.uint8)
    packed[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    packed[:, 4:8] = m[:, :4] | ((m[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)
    return dbytes, mbytes, packed, q


def _nibbles(q):
    """codes [n, 8, 32] -> 128 bytes: sub-blocks 2p and 2p+1 share bytes 32p .. 32p+31 (low, high nibble)."""
    pairs = (q & 15).reshape(q.shape[0], 4, 2, 32)
    return (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(q.shape[0], 128)


def quantize_q4_k(w):
    """float32 [rows, cols] -> uint8 [rows, cols / 256 * 144] (block_q4_K: d, dmin, 12 scale bytes, 128 code bytes)."""
    dbytes, mbytes, packed, q = _scale_min(_blocks(w, "q4_k"), 15)
    return np.concatenate([dbytes, mbytes, packed, _nibbles(q)], axis=1).reshape(w.shape[0], -1)


def quantize_q5_k(w):
    """float32 [rows, cols] -> uint8 [rows, cols / 256 * 176] (block_q5_K: d, dmin, 12 scale bytes, qh[32], qs[128])."""
    dbytes, mbytes, packed, q = _scale_min(_blocks(w, "q5_k"), 31)
    qh = ((q >> 4).astype(np.uint8) << np.arange(8, dtype=np.uint8).reshape(1, 8, 1)).sum(axis=1, dtype=np.uint8)
    return np.concatenate([dbytes, mbytes, packed, qh, _nibbles(q)], axis=1).reshape(w.shape[0], -1)


def quantize_q6_k(w):
    """float32 [rows, cols] -> uint8 [rows, cols / 256 * 210] (block_q6_K: ql[128], qh[64], int8 scales[16], d)."""
    x = _blocks(w, "q6_k")
    n = x.shape[0]
    sub = x.reshape(n, 16, 16)
    scale = (np.abs(sub).max(axis=2) / np.float32(31)).astype(np.float32)
    dbytes, d = _half(scale.max(axis=1) / np.float32(127))
    sc = np.clip(np.rint(_safe_div(scale, d[:, None])), 0, 127).astype(np.int8)
    f = (d[:, None] * sc.astype(np.float32))[:, :, None]
    q = (np.clip(np.rint(_safe_div(sub, np.broadcast_to(f, sub.shape))), -32, 31) + 32).astype(np.uint8)
    q = q.reshape(n, 2, 4, 32)                                 # [block, half, quarter, l]
    ql = np.concatenate([(q[:, :, 0] & 15) | (q[:, :, 2] & 15) << 4, (q[:, :, 1] & 15) | (q[:, :, 3] & 15) << 4],
                        axis=2)
    qh = (q[:, :, 0] >> 4) | (q[:, :, 1] >> 4) << 2 | (q[:, :, 2] >> 4) << 4 | (q[:, :, 3] >> 4) << 6
    return np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc.view(np.uint8), dbytes],
                          axis=1).reshape(w.shape[0], -1)


def _f16(b):
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _factors(b):
    """Q4_K / Q5_K blocks [n, bytes] -> (d * sc, dmin * m) float32 [n, 8, 1] (get_scale_min_k4's scales and mins)."""
    d, dmin, s = _f16(b[:, 0:2]), _f16(b[:, 2:4]), b[:, 4:16]
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return (d * sc.astype(np.float32))[:, :, None], (dmin * m.astype(np.float32))[:, :, None]


def dequantize_q4_k(raw, rows, cols):
    """uint8 Q4_K blocks of a [rows, cols] matrix -> float32, gguf.quants' values bit for bit."""
    b = np.asarray(raw, np.uint8).reshape(-1, 144)
    n = b.shape[0]
    d1, m1 = _factors(b)
    qs = b[:, 16:].reshape(n, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    q = (qs & 15).reshape(n, 8, 32).astype(np.float32)
    return (d1 * q - m1).reshape(rows, cols)


def dequantize_q5_k(raw, rows, cols):
    """uint8 Q5_K blocks of a [rows, cols] matrix -> float32, gguf.quants' values bit for bit."""
    b = np.asarray(raw, np.uint8).reshape(-1, 176)
    n = b.shape[0]
    d1, m1 = _factors(b)
    qs = b[:, 48:].reshape(n, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    qh = b[:, 16:48].reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    q = ((qs & 15).reshape(n, 8, 32) | ((qh & 1) << 4)).astype(np.float32)
    return (d1 * q - m1).reshape(rows, cols)


def dequantize_q6_k(raw, rows, cols):
    """uint8 Q6_K blocks of a [rows, cols] matrix -> float32, gguf.quants' values bit for bit."""
    b = np.asarray(raw, np.uint8).reshape(-1, 210)
    n = b.shape[0]
    ql, qh = b[:, :128].reshape(n, 2, 1, 64), b[:, 128:192].reshape(n, 2, 1, 32)
    f = (_f16(b[:, 208:210]) * b[:, 192:208].view(np.int8).astype(np.float32))[:, :, None]
    lo = ((ql >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)) & 15).reshape(n, 2, 4, 32)
    hi = ((qh >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)) & 3).reshape(n, 2, 4, 32)
    q = ((lo | (hi << 4)).astype(np.int16) - 32).reshape(n, 16, 16).astype(np.float32)
    return (f * q).reshape(rows, cols)


QUANTIZE = {"q4_k": quantize_q4_k, "q5_k": quantize_q5_k, "q6_k": quantize_q6_k}
DEQUANTIZE = {"q4_k": dequantize_q4_k, "q5_k": dequantize_q5_k, "q6_k": dequantize_q6_k}
