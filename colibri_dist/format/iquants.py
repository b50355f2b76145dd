"""llama.cpp's non-linear 4-bit i-quants (IQ4_XS, IQ4_NL): a reference quantizer and the exact dequantizer.

Role in the data flow: format/quantize.py's quantize_matrix / dequantize for the `iq4_xs` and `iq4_nl`
encodings (native/src/iquants.h reads the same bytes). A GGUF's i-quant blocks are copied as they are
(Encoded); this quantizer lets colibri write the encodings from float weights (tests, convert --experts
iq4_xs). It is a plain one, not llama.cpp's weighted search: each block (IQ4_XS: each sub-block of 32) maps
its largest magnitude onto kvalues_iq4nl's -127 and every element to the nearest of the 16 levels
(ggml's best_index_int8, the upper on a tie); IQ4_XS then rounds the 8 sub-block scales to 6-bit multiples
of one f16 d. Its blocks are valid IQ4_XS/IQ4_NL, a little less accurate than llama-quantize's. The
dequantizers compute every value with gguf.quants' float32 operations in its order (IQ4_XS:
(d * (ls - 32)) * kv[q]; IQ4_NL: d * kv[q]), so they equal gguf.quants.dequantize bit for bit.
"""
import numpy as np

from ..errors import InvalidArgument

KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
GROUP = {"iq4_xs": 256, "iq4_nl": 32}
BLOCK_BYTES = {"iq4_xs": 136, "iq4_nl": 18}


def _blocks(w, scheme):
    rows, cols = w.shape
    if cols % GROUP[scheme]:
        raise InvalidArgument(f"{scheme} needs cols a multiple of {GROUP[scheme]} (llama.cpp's blocks), "
                              f"got a [{rows}, {cols}] matrix")
    return np.asarray(w, np.float32).reshape(-1, GROUP[scheme])


def _half(x, scheme):
    """float32 -> (f16 bytes [n, 2], the f16 value back as float32); a scale past f16's range is refused."""
    h = np.asarray(x, np.float32).astype(np.float16)
    if not np.isfinite(h).all():
        raise InvalidArgument(f"{scheme}: a block scale does not fit float16 (weights up to "
                              f"{float(np.abs(x).max()):g} times 127)")
    return h.reshape(-1, 1).view(np.uint8), h.astype(np.float32)


def _safe_div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b == 0, np.float32(0), a / np.where(b == 0, np.float32(1), b)).astype(np.float32)


def _nearest(al):
    """Index of the level nearest to each al (ggml's best_index_int8: the upper one on a tie)."""
    kv = KVALUES.astype(np.float32)
    mu = np.clip(np.searchsorted(kv, al, side="right"), 1, 15)
    return np.where(al - kv[mu - 1] < kv[mu] - al, mu - 1, mu).astype(np.uint8)


def _signed_max(x):
    """Per row of x [..., n]: the element of largest magnitude, with its sign (the first on a tie)."""
    return np.take_along_axis(x, np.abs(x).argmax(axis=-1)[..., None], axis=-1)[..., 0]


def _nibbles(q):
    """indices [..., 32] -> 16 bytes per run of 32: element j < 16 the low nibble of byte j, j >= 16 the high."""
    return q[..., :16] | (q[..., 16:] << 4)


def quantize_iq4_nl(w):
    """float32 [rows, cols] -> uint8 [rows, cols / 32 * 18] (block_iq4_nl: f16 d, qs[16])."""
    x = _blocks(w, "iq4_nl")
    dbytes, d = _half(_signed_max(x) / np.float32(-127), "iq4_nl")
    q = _nearest(_safe_div(x, np.broadcast_to(d[:, None], x.shape)))
    return np.concatenate([dbytes, _nibbles(q)], axis=1).reshape(w.shape[0], -1)


def quantize_iq4_xs(w):
    """float32 [rows, cols] -> uint8 [rows, cols / 256 * 136] (block_iq4_xs: f16 d, scales_h, scales_l[4], qs)."""
    x = _blocks(w, "iq4_xs")
    n = x.shape[0]
    sub = x.reshape(n, 8, 32)
    scale = (_signed_max(sub) / np.float32(-127)).astype(np.float32)          # each sub-block's own step
    dbytes, d = _half(_signed_max(scale) / np.float32(-32), "iq4_xs")           # the largest one is ls - 32 = -32
    ls = np.clip(np.rint(_safe_div(scale, np.broadcast_to(d[:, None], scale.shape))), -32, 31).astype(np.int32)
    dl = (d[:, None] * ls.astype(np.float32))[:, :, None]                      # the decoder's factor
    q = _nearest(_safe_div(sub, np.broadcast_to(dl, sub.shape)))
    l = (ls + 32).astype(np.uint16)
    scales_h = ((l >> 4) << (2 * np.arange(8, dtype=np.uint16))).sum(axis=1, dtype=np.uint16)
    scales_l = (l[:, 0::2] & 15) | ((l[:, 1::2] & 15) << 4)
    return np.concatenate([dbytes, scales_h.reshape(n, 1).view(np.uint8), scales_l.astype(np.uint8),
                           _nibbles(q).reshape(n, 128)], axis=1).reshape(w.shape[0], -1)


def _f16(b):
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _levels(qs):
    """Index bytes [..., 16] -> kv[q] as float32 [..., 32] (low nibbles, then high nibbles)."""
    return KVALUES[np.concatenate([qs & 15, qs >> 4], axis=-1)].astype(np.float32)


def dequantize_iq4_nl(raw, rows, cols):
    """uint8 IQ4_NL blocks of a [rows, cols] matrix -> float32, gguf.quants' values bit for bit."""
    b = np.asarray(raw, np.uint8).reshape(-1, 18)
    return (_f16(b[:, 0:2]) * _levels(b[:, 2:])).reshape(rows, cols)


def dequantize_iq4_xs(raw, rows, cols):
    """uint8 IQ4_XS blocks of a [rows, cols] matrix -> float32, gguf.quants' values bit for bit."""
    b = np.asarray(raw, np.uint8).reshape(-1, 136)
    n = b.shape[0]
    s = np.arange(8)
    scales_h = b[:, 2].astype(np.int32) | (b[:, 3].astype(np.int32) << 8)
    ls = ((b[:, 4 + s // 2] >> (4 * (s % 2))) & 15) | (((scales_h[:, None] >> (2 * s)) & 3) << 4)
    dl = (_f16(b[:, 0:2]) * (ls - 32).astype(np.float32))[:, :, None]
    return (dl * _levels(b[:, 8:].reshape(n, 8, 16))).reshape(rows, cols)


QUANTIZE = {"iq4_xs": quantize_iq4_xs, "iq4_nl": quantize_iq4_nl}
DEQUANTIZE = {"iq4_xs": dequantize_iq4_xs, "iq4_nl": dequantize_iq4_nl}
