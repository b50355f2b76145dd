"""The long-row paths of the sampler: top-p without a whole-row sort, the inverse CDF without a
whole-row cumsum.

Role in the data flow: sampler._sample_filtered hands rows longer than LONG_ROW tokens (a real
vocabulary with no top_k) here. A near-flat row (random weights, high temperature) has a nucleus of
most of the vocabulary, so the short-row path's sort of the candidates is a sort of the whole row
(~6 ms per token at vocab 50,304). Here:
  nucleus_long: the values e (exp(z - max), float32 in [0, 1]) are binned by their float32 bit
    pattern (256 bins per octave; for non-negative floats the bits order exactly as the values, so
    equal values share a bin; bins past 2^-24 of the max merge into one, lower bound 0). Counts per bin bound the mass above each bin from below and above;
    that brackets the bins holding the nucleus boundary. Only the tokens of those bins are sorted;
    the mass above them is one exact sum. A token is kept when the mass ranked above it (most likely
    first, ties by id) is < top_p x total: the sampler's definition, its float64 sums in another order.
  invert_cdf_blocked: the inverse CDF over the kept tokens in id order, from float64 sums of
    256-token blocks and one block's cumsum.
Both are functions of the row alone (no batch, no thread count), so batch invariance holds.
"""
import threading

import numpy as np

LONG_ROW = 4096                    # rows longer than this take these paths
_SHIFT = 15                        # float32 bits >> 15: 256 bins per octave (the fastest on this host)
_CLIP = 24 << (23 - _SHIFT)        # bins past 2^-24 of the max merge into this one (lower bound 0)
_ONE = 0x3F800000                  # bits of 1.0f, the largest e
_BLOCK = 256
_SLACK = 1e-9                      # the bounds are widened by this (relative) against rounding


def _bin_table():
    """float64 (largest, smallest) value a non-negative float32 in bin b can hold, for every bin."""
    b = np.arange((_ONE >> _SHIFT) + 2, dtype=np.int64)
    top = np.maximum(_ONE - (b << _SHIFT), 0).astype(np.int32)
    bottom = np.maximum(_ONE - ((b + 1) << _SHIFT) + 1, 0).astype(np.int32)
    return top.view(np.float32).astype(np.float64), bottom.view(np.float32).astype(np.float64)


_HI, _LO = _bin_table()
_HI, _LO = _HI[:_CLIP + 1], _LO[:_CLIP + 1].copy()
_LO[_CLIP] = 0.0


class Workspace:
    """Scratch rows of one length for one thread (the long paths allocate nothing per token: fresh
    200 KB arrays cost page faults that outweigh the arithmetic)."""

    def __init__(self, n):
        padded = -(-n // _BLOCK) * _BLOCK
        self.n = n
        self.z, self.e, self.x = np.empty(n, np.float32), np.empty(n, np.float32), np.empty(n, np.float32)
        self.w = np.zeros(padded, np.float32)          # the tail past n stays 0
        self.key, self.mask, self.mask2 = np.empty(n, np.int32), np.empty(n, bool), np.empty(n, bool)


_LOCAL = threading.local()


def workspace(n):
    """This thread's workspace for rows of n tokens (a few lengths kept: the vocabulary, top_k sets)."""
    spaces = getattr(_LOCAL, "spaces", None)
    if spaces is None:
        spaces = _LOCAL.spaces = {}
    ws = spaces.get(n)
    if ws is None:
        if len(spaces) >= 4:
            spaces.pop(next(iter(spaces)))
        ws = spaces[n] = Workspace(n)
    return ws


def softmax_row(x, temperature, ws, xmax=None):
    """e = exp(z - max z), z = x / T, float32 (the short path's arithmetic), in ws.e; xmax = x.max()
    if known (then max z = xmax / T, the same float32: rounding a division is monotone)."""
    t = np.float32(temperature)
    z = np.divide(x, t, out=ws.z)
    zmax = z.max() if xmax is None else np.float32(xmax) / t
    e = np.subtract(z, zmax, out=ws.e)
    return np.exp(e, out=e)


def nucleus_long(e, total, top_p, ws):
    """The kept tokens' weights (e, 0 elsewhere) in ws.w[:n] (see the module doc). e: float32 >= 0,
    max 1, no NaN; ws: its workspace."""
    limit = top_p * total
    key = np.subtract(_ONE, e.view(np.int32), out=ws.key)
    key = np.right_shift(key, _SHIFT, out=key)          # 0 = the likeliest bin; grows as e falls
    counts = np.bincount(key)
    if counts.shape[0] > _CLIP + 1:                     # merge the negligible tail bins into the last
        counts = np.concatenate((counts[:_CLIP], [counts[_CLIP:].sum()]))
    hi, lo = _HI[:counts.shape[0]], _LO[:counts.shape[0]]
    hi_above = np.concatenate(([0.0], np.cumsum(counts * hi)[:-1]))   # bounds on the mass of bins < b
    lo_above = np.concatenate(([0.0], np.cumsum(counts * lo)[:-1]))
    b_lo = max(int(np.searchsorted(hi_above * (1 + _SLACK), limit, side="left")) - 1, 0)  # bins < b_lo: kept
    b_hi = int(np.searchsorted(lo_above * (1 - _SLACK), limit, side="left"))          # bins >= b_hi: not
    w, m, m2 = ws.w[:ws.n], ws.mask, ws.mask2
    rel = np.subtract(key, b_lo, out=key)               # < 0 above the band; as uint32, < width in it
    above = 0.0
    if b_lo > 0:
        np.multiply(e, np.less(rel, 0, out=m), out=w)
        above = w.sum(dtype=np.float64)
    width = b_hi - b_lo if b_hi <= _CLIP else 1 << 30    # (the merged bin holds every key past _CLIP;
    #                                                     negative rel, as uint32, is >= 2^31)
    band = e[np.less(rel.view(np.uint32), width, out=m)]
    s = np.sort(band)[::-1].astype(np.float64)          # the band, most likely first
    before = above + (np.cumsum(s) - s)                 # mass ranked above each band token
    k = max(int(np.count_nonzero(before < limit)), 1)   # (>= 1: the likeliest band token, rounding aside)
    v = np.float32(s[k - 1])                            # the smallest kept value
    ties = k - int(np.count_nonzero(s[:k] > v))         # how many tokens of value v are kept (by id)
    if ties == int(np.count_nonzero(s == v)):           # all of them (always, unless the nucleus
        return np.multiply(e, np.greater_equal(e, v, out=m), out=w)   # ends inside a run of ties)
    np.greater(e, v, out=m)
    m[np.flatnonzero(np.equal(e, v, out=m2))[:ties]] = True
    return np.multiply(e, m, out=w)


def invert_cdf_blocked(w, u, ws):
    """The first position whose cumulative weight (id order) exceeds u x the total weight; w float32
    >= 0 with some weight, either ws.w[:n] or a row to copy there. Block sums in float64, then the
    cumsum of the one block it falls in."""
    if w.base is not ws.w and w is not ws.w:
        ws.w[:ws.n] = w
    blocks = ws.w.reshape(-1, _BLOCK).sum(axis=1, dtype=np.float64)
    w = ws.w
    cum = blocks.cumsum()
    target = u * cum[-1]
    c = min(int(cum.searchsorted(target, side="right")), cum.shape[0] - 1)
    while c > 0 and blocks[c] == 0:                      # rounding put it in an empty block
        c -= 1
    base = cum[c - 1] if c else 0.0
    local = w[c * _BLOCK:(c + 1) * _BLOCK].astype(np.float64).cumsum()
    i = min(int(local.searchsorted(target - base, side="right")), local.shape[0] - 1)
    j = c * _BLOCK + i
    if w[j] == 0:                                        # never draw a zero-probability token
        before = np.flatnonzero(w[:j + 1] > 0)
        j = int(before[-1]) if before.shape[0] else int(np.flatnonzero(w > 0)[0])
    return j
