"""numpy reference of the k-quant x Q8_K product (docs/KERNELS.md "k-quants x Q8_K"), exact to the bit.

kq_parts reads llama.cpp's block_q4_K / block_q5_K / block_q6_K (ggml-common.h) into codes, scales, mins and the
f16 factors; parts_dequantize rebuilds the weights from them as ggml's dequantize_row_* does (the tests check it
against gguf.quants.dequantize, so the parts are the oracle's). quantize_q8k is ggml's quantize_row_q8_K_ref
(per 256 inputs: max = the first input of the largest |x|, iscale = -127 / max, q = min(127, rint(iscale * x)),
d = 1 / iscale, bsums of 16). kq_matmul: per output (t, r) and super-block b in order, integer sums in int64
(q4_k / q5_k: I = sum_j sc_j * sum_{k in j} q * a, M = sum_j m_j * bsum32_j), then s = fma(d * da, I, s) and
s = fma(-(dmin * da), M, s). iq4_xs (block_iq4_xs, gguf.quants' kvalues: q the signed value, sc = ls - 32 per 32)
and q6_k (sc per 16, the -32 offset through the bsums) take ggml_vec_dot_iq4_xs_q8_K's / _q6_K_q8_K's own order
(8 lanes, hsum_float_8 at the end). q6_k_r16 (the same Q6_K blocks; kq_matmul takes them in plain row order) takes
q4_k's order instead: I = sum_j sc_j * sum_{k in 16-sub-block j} (q - 32) * a, s = fma(d * da, I, s).
"""
import numpy as np

from w4a8_ref import fma32, hsum8

QK = 256
BLOCK_BYTES = {"q4_k": 144, "q5_k": 176, "q6_k": 210, "iq4_xs": 136}


def _f16(raw, o):
    return raw[:, o:o + 2].copy().view(np.float16).astype(np.float32).reshape(-1)


def _scale_min_k4(s):
    """ggml's get_scale_min_k4 for j = 0..7 on the 12 scale bytes [n, 12] -> (sc [n, 8], m [n, 8])."""
    s = s.astype(np.int64)
    sc = np.empty((s.shape[0], 8), np.int64)
    m = np.empty_like(sc)
    for j in range(8):
        if j < 4:
            sc[:, j], m[:, j] = s[:, j] & 63, s[:, j + 4] & 63
        else:
            sc[:, j] = (s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4)
            m[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc, m


def kq_parts(raw, scheme):
    """raw uint8 [n blocks, block bytes] -> dict(codes int64 [n, 256] unsigned (iq4_xs: gguf's kvalues, signed), sc,
    m (q4/q5), d, dmin (q4/q5))."""
    raw = np.asarray(raw, np.uint8).reshape(-1, BLOCK_BYTES[scheme])
    n = raw.shape[0]
    if scheme == "iq4_xs":               # block_iq4_xs: d, scales_h (2 bits per sub-block), scales_l, qs
        import gguf
        kv = np.asarray(gguf.quants.IQ4_NL.kvalues, np.int64)
        qs = raw[:, 8:].reshape(n, 8, 16).astype(np.int64)
        codes = kv[np.concatenate([qs & 15, qs >> 4], axis=2)].reshape(n, QK)
        h = raw[:, 2:4].copy().view("<u2").astype(np.int64)                       # [n, 1]
        lo = raw[:, 4:8].astype(np.int64)
        j = np.arange(8)
        sc = (((lo[:, j // 2] >> (4 * (j % 2))) & 15) | (((h >> (2 * j)) & 3) << 4)) - 32
        return {"codes": codes, "sc": sc, "d": _f16(raw, 0)}
    if scheme == "q6_k":
        ql, qh = raw[:, :128].astype(np.int64), raw[:, 128:192].astype(np.int64)
        q = np.empty((n, QK), np.int64)
        for h in range(2):
            lo, hi = ql[:, 64 * h:64 * h + 64], qh[:, 32 * h:32 * h + 32]
            for t in range(4):
                nib = (lo[:, 32 * (t & 1):32 * (t & 1) + 32] >> (4 * (t >> 1))) & 15
                q[:, 128 * h + 32 * t:128 * h + 32 * t + 32] = nib | (((hi >> (2 * t)) & 3) << 4)
        return {"codes": q, "sc": raw[:, 192:208].view(np.int8).astype(np.int64), "d": _f16(raw, 208)}
    sc, m = _scale_min_k4(raw[:, 4:16])
    qs = raw[:, 16:144] if scheme == "q4_k" else raw[:, 48:176]
    q = np.empty((n, QK), np.int64)
    for p in range(4):
        b = qs[:, 32 * p:32 * p + 32].astype(np.int64)
        q[:, 64 * p:64 * p + 32], q[:, 64 * p + 32:64 * p + 64] = b & 15, b >> 4
    if scheme == "q5_k":
        qh = raw[:, 16:48].astype(np.int64)
        for j in range(8):
            q[:, 32 * j:32 * j + 32] |= ((qh >> j) & 1) << 4
    return {"codes": q, "sc": sc, "m": m, "d": _f16(raw, 0), "dmin": _f16(raw, 2)}


def parts_dequantize(p, scheme):
    """Weights [n, 256] float32 from the parts, in ggml's rounding order."""
    q = p["codes"].astype(np.float32)
    if scheme == "iq4_xs":
        f = (p["d"][:, None] * p["sc"].astype(np.float32)).astype(np.float32)
        return (np.repeat(f, 32, axis=1) * q).astype(np.float32)
    if scheme == "q6_k":
        f = (p["d"][:, None] * p["sc"].astype(np.float32)).astype(np.float32)
        return (np.repeat(f, 16, axis=1) * (q - np.float32(32))).astype(np.float32)
    d1 = (p["d"][:, None] * p["sc"].astype(np.float32)).astype(np.float32)
    m1 = (p["dmin"][:, None] * p["m"].astype(np.float32)).astype(np.float32)
    return (np.repeat(d1, 32, axis=1) * q - np.repeat(m1, 32, axis=1)).astype(np.float32)


def quantize_q8k(x):
    """x float32 [n, K] -> (qs int64 [n, K / 256, 256], d float32 [n, K / 256], bsums int64 [n, K / 256, 16])."""
    x = np.asarray(x, np.float32)
    n, K = x.shape
    xb = x.reshape(n, K // QK, QK)
    ax = np.abs(xb)
    first = np.argmax(ax == ax.max(axis=2, keepdims=True), axis=2)          # first index of the largest |x|
    mx = np.take_along_axis(xb, first[..., None], axis=2)[..., 0]
    zero = mx == 0
    iscale = np.where(zero, np.float32(0), np.float32(-127) / np.where(zero, np.float32(1), mx)).astype(np.float32)
    q = np.minimum(np.rint((xb * iscale[..., None]).astype(np.float32)), 127).astype(np.int64)
    d = np.where(zero, np.float32(0), np.float32(1) / np.where(zero, np.float32(1), iscale)).astype(np.float32)
    return q, d, q.reshape(n, K // QK, 16, 16).sum(axis=3)


def kq_matmul(x, raw, scheme, rows, cols):
    """out [n, rows] float32 of x [n, cols] times the k-quant matrix of blocks raw [rows, row bytes]."""
    nb = cols // QK
    p = kq_parts(raw, "q6_k" if scheme == "q6_k_r16" else scheme)
    codes = p["codes"].reshape(rows, nb, QK)
    qa, da, bsums = quantize_q8k(x)
    n = qa.shape[0]
    if scheme in ("iq4_xs", "q6_k"):
        return _ggml_lanes(p, scheme, codes, qa, da, bsums, rows, nb)
    if scheme == "q6_k_r16":
        return _one_integer_q6(p, codes, qa, da, rows, nb)
    s = np.zeros((n, rows), np.float32)
    for b in range(nb):
        sc, m = p["sc"].reshape(rows, nb, 8)[:, b], p["m"].reshape(rows, nb, 8)[:, b]
        prod = codes[None, :, b, :] * qa[:, None, b, :]
        I = (prod.reshape(n, rows, 8, 32).sum(axis=3) * sc[None]).sum(axis=2)
        M = (m[None] * bsums[:, None, b, :].reshape(n, 1, 8, 2).sum(axis=3)).sum(axis=2)
        assert np.abs(I).max(initial=0) < 2 ** 31
        dw = p["d"].reshape(rows, nb)[:, b]
        dd = (dw[None, :] * da[:, b, None]).astype(np.float32)
        s = fma32(dd, I.astype(np.float32), s)
        dm = (p["dmin"].reshape(rows, nb)[:, b][None, :] * da[:, b, None]).astype(np.float32)
        s = fma32(-dm, M.astype(np.float32), s)
    return s


def _ggml_lanes(p, scheme, codes, qa, da, bsums, rows, nb):
    """iq4_xs and q6_k in ggml_vec_dot_iq4_xs_q8_K's / _q6_K_q8_K's order: per super-block 8 integer lanes (lane l:
    elements 4l .. 4l+3 of each 32, times their scale; q6_k: its unsigned codes, then minus 32 * (sc_2l * bsums_2l +
    sc_2l+1 * bsums_2l+1)), acc_l = fma(d * da, lane_l, acc_l), then hsum_float_8's sum."""
    n = qa.shape[0]
    acc = np.zeros((8, n, rows), np.float32)
    for b in range(nb):
        prod = codes[None, :, b, :] * qa[:, None, b, :]                          # [n, rows, 256]
        if scheme == "q6_k":
            sc = p["sc"].reshape(rows, nb, 16)[:, b]
            per = prod * np.repeat(sc, 16, axis=1)[None]                          # each element times its scale
            lanes = per.reshape(n, rows, 8, 8, 4).sum(axis=(2, 4))                # [n, rows, 8]
            lanes = lanes - 32 * (sc[None] * bsums[:, None, b, :]).reshape(n, rows, 8, 2).sum(axis=3)
        else:
            sc = p["sc"].reshape(rows, nb, 8)[:, b]
            lanes = (prod.reshape(n, rows, 8, 8, 4).sum(axis=4) * sc[None, :, :, None]).sum(axis=2)   # [n, rows, 8]
        dd = (p["d"].reshape(rows, nb)[:, b][None, :] * da[:, b, None]).astype(np.float32)
        for lane in range(8):
            acc[lane] = fma32(dd, lanes[..., lane].astype(np.float32), acc[lane])
    return hsum8(acc)


def quantization_bound(x, weights):
    """Per (t, r): sum over blocks of |da| / 2 * sum |w| over the block: how far the Q8_K rounding alone can move
    the product from weights @ x (weights float [rows, cols] as decoded)."""
    _, da, _ = quantize_q8k(x)
    wabs = np.abs(np.asarray(weights, np.float64)).reshape(weights.shape[0], -1, QK).sum(axis=2)   # [rows, nb]
    return (np.abs(da.astype(np.float64)) / 2) @ wabs.T


def _one_integer_q6(p, codes, qa, da, rows, nb):
    """q6_k_r16's order: per super-block one integer I = sum_j sc_j * sum_{k in j} (q - 32) * a (int64, checked to
    fit int32), then s = fma(d * da, I, s)."""
    n = qa.shape[0]
    s = np.zeros((n, rows), np.float32)
    for b in range(nb):
        sc = p["sc"].reshape(rows, nb, 16)[:, b]
        prod = (codes[None, :, b, :] - 32) * qa[:, None, b, :]                    # [n, rows, 256]
        I = (prod.reshape(n, rows, 16, 16).sum(axis=3) * sc[None]).sum(axis=2)
        assert np.abs(I).max(initial=0) < 2 ** 31
        dd = (p["d"].reshape(rows, nb)[:, b][None, :] * da[:, b, None]).astype(np.float32)
        s = fma32(dd, I.astype(np.float32), s)
    return s
