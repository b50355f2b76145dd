"""Per-request token sampling: greedy, temperature, min-p, top-k, top-p, and logprobs.

Role in the data flow: the scheduler hands each request's last-position logits (float32 [vocab],
straight from the model) to that request's Sampler and gets back the next token (and its logprobs).
The request's logits processors (logits.py: masks, penalties) give the row sampled from; logprobs
are always of the raw row. Each Sampler owns one numpy Generator seeded from the request's seed
(or, without one, from the engine's base seed and the request id; sample i > 0 of n from that seed
and i) and consumes exactly one uniform draw per generated token,
so a request's stream never depends on what else is in the batch. All arithmetic is on that one
row (sums in float64), so the result is a function of the logits' bits alone. Rows longer than
LONG_ROW without top_k (a real vocabulary) take sampler_fast.py: no whole-row sort or cumsum.
"""
import hashlib
import math

import numpy as np

from ..errors import NumericalError
from .logits import min_p_mask
from .outputs import TokenLogprobs
from .sampler_fast import LONG_ROW, invert_cdf_blocked, nucleus_long, softmax_row, workspace


def derive_seed(base_seed, request_id):
    """The seed of a request that has none: stable across runs, processes and Python versions."""
    digest = hashlib.blake2b(f"{int(base_seed)}\x00{request_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def request_seed(params, base_seed=0, request_id=0, sample_index=0):
    """The RNG seed of sample `sample_index` of a request: its own seed (or the derived one) for
    sample 0, so n=1 and sample 0 of n>1 agree; a seed derived from that and i for the others."""
    seed = params.seed if params.seed is not None else derive_seed(base_seed, request_id)
    return seed if sample_index == 0 else derive_seed(seed, f"sample-{sample_index}")


def make_rng(params, base_seed=0, request_id=0, sample_index=0):
    return np.random.Generator(np.random.PCG64(request_seed(params, base_seed, request_id, sample_index)))


class Sampler:
    def __init__(self, params, base_seed=0, request_id=0, sample_index=0):
        self.params = params
        self.greedy = params.greedy              # params are frozen: decided once, not per token
        self.rng = make_rng(params, base_seed, request_id, sample_index)

    def sample(self, logits, procs=None, output=()):
        """logits: float32 [vocab] -> (token_id, TokenLogprobs | None); procs: the request's
        logits.Processors (output: its tokens so far). NonFiniteLogits when the row holds a NaN or
        +inf, or nothing but -inf (after the processors' masks)."""
        u = self.rng.random()                    # the one draw of this token, greedy or not
        p = self.params
        x = logits if procs is None else procs.apply(logits, output)
        if x is not logits:
            _check_finite(logits.max())        # a NaN the masks hid is still a broken row
        if self.greedy:
            token = int(x.argmax())            # first maximum = lowest token id among ties
            _check_finite(x[token])            # argmax lands on a NaN or +inf if there is one
        else:
            xmax = x.max()
            _check_finite(xmax)
            token = _sample_filtered(x, p.temperature, p.top_k, p.top_p, u, p.min_p, xmax)
        lp = token_logprobs(logits, token, p.logprobs) if p.logprobs is not None else None
        return token, lp


class NonFiniteLogits(NumericalError):
    """The model's logits for a request hold NaN or +inf (or only -inf): nothing can be sampled."""


def _check_finite(value):
    if not math.isfinite(float(value)):
        raise NonFiniteLogits(f"the model's logits are not finite (max {float(value)})")


def logsumexp(logits):
    """log(sum(exp(logits))) of a float32 row: exp in float32 around the max, summed in float64."""
    x = np.asarray(logits, dtype=np.float32)
    m = x.max()
    if not math.isfinite(float(m)):            # NaN, +inf, or nothing but -inf: not a distribution
        return float(m)
    return float(m) + math.log(float(np.exp(x - m).sum(dtype=np.float64)))


def log_softmax(logits):
    """The whole log_softmax row (float64); every logprob reported is exactly an entry of this."""
    return np.asarray(logits, dtype=np.float32).astype(np.float64) - logsumexp(logits)


def token_logprobs(logits, token, n, lse=None):
    x = np.asarray(logits, dtype=np.float32)
    lse = logsumexp(x) if lse is None else lse
    chosen = float(np.float64(x[token]) - lse)
    rank = 1 + int(np.count_nonzero(x > x[token]))
    top = tuple((int(i), float(np.float64(x[i]) - lse)) for i in top_n_ids(x, n))
    return TokenLogprobs(int(token), chosen, rank, top)


def top_n_ids(x, n):
    """Ids of the n largest entries of x, largest first, ties by token id."""
    n = min(n, x.shape[0])
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    cand = top_candidates(x, n)
    if cand.shape[0] > 4 * n:                 # narrow to the n-th value's ties before sorting
        kth = np.partition(x[cand], cand.shape[0] - n)[cand.shape[0] - n]
        cand = cand[x[cand] >= kth]
    return cand[np.lexsort((cand, -x[cand]))][:n]


def top_n(lp, n):
    """(id, value) pairs of the n largest entries of a logprob row, ties by token id (test helper)."""
    return tuple((int(i), float(lp[i])) for i in top_n_ids(np.asarray(lp), n))


def top_candidates(x, n):
    """Sorted ids of a set holding the n largest entries of x and every tie of the n-th (a superset:
    all entries within a widening margin of the max, else everything). Cheap for peaked rows."""
    xmax = x.max()
    for margin in (2.0, 8.0, 32.0):
        cand = np.flatnonzero(x >= xmax - margin)
        if cand.shape[0] >= n:
            return cand
    return np.arange(x.shape[0])


def _sample_filtered(logits, temperature, top_k, top_p, u, min_p=0.0, xmax=None):
    """vLLM semantics: scale by 1/T, drop tokens below min_p x the most likely one's probability,
    keep the top_k largest (ties with the k-th kept), then the
    smallest most-likely set whose mass reaches top_p (a token is kept when the mass of the tokens
    ranked above it, most likely first and ties by id, is < top_p; the most likely always stays),
    renormalize, invert the CDF at u over the kept tokens in token-id order. Every step is a
    function of this row alone; the candidate shortcuts only skip tokens that cannot be kept.
    Rows longer than LONG_ROW take the binned nucleus and the blocked CDF (sampler_fast.py): the
    same definition, its sums taken in another order (they can differ in the last bits)."""
    x = np.asarray(logits, dtype=np.float32)
    if x.shape[0] > LONG_ROW and not 0 < top_k < x.shape[0]:
        return _sample_long(x, temperature, top_p, u, min_p, xmax)
    z = x / np.float32(temperature)
    ids = None                                 # None = every token (no top_k): positions are token ids
    if min_p > 0.0:
        z = min_p_mask(z, min_p)
    if 0 < top_k < z.shape[0]:
        cand = top_candidates(z, top_k)
        kth = np.partition(z[cand], cand.shape[0] - top_k)[cand.shape[0] - top_k]
        ids = cand[z[cand] >= kth]
        z = z[ids]
    e = np.exp(z - z.max())                    # float32, the most likely token's is exactly 1
    total = e.sum(dtype=np.float64)
    if e.shape[0] > LONG_ROW:                  # a top_k of more than LONG_ROW tokens
        ws = workspace(e.shape[0])
        j = invert_cdf_blocked(nucleus_long(e, total, top_p, ws) if top_p < 1.0 else e, u, ws)
    else:
        if top_p < 1.0:                        # probabilities (e / total in float64) of candidates only
            keep = _nucleus(e, total, top_p)
            ids = keep if ids is None else ids[keep]
            e = e[keep]
        cdf = (e.astype(np.float64) / total).cumsum()
        j = min(int(cdf.searchsorted(u * cdf[-1], side="right")), cdf.shape[0] - 1)
    return int(j if ids is None else ids[j])


def _sample_long(x, temperature, top_p, u, min_p, xmax=None):
    """A whole long row (no top_k): the same steps in a reused workspace, top-p by nucleus_long.
    xmax: x.max() when the caller has it (max(x / T) is max(x) / T exactly: division is monotone)."""
    ws = workspace(x.shape[0])
    e = softmax_row(x, temperature, ws, xmax)
    if min_p > 0.0:                            # min_p_mask's rule: p_i < min_p * p_max is dropped
        np.multiply(e, e >= np.float32(min_p), out=e)
    total = e.sum(dtype=np.float64)
    if top_p < 1.0:
        peaked = np.greater_equal(e, np.float32(1e-2), out=ws.mask)     # e.max() is 1
        if np.count_nonzero(peaked) <= LONG_ROW:            # a peaked row: the short path's nucleus
            cand = np.flatnonzero(peaked)
            if (e[cand].astype(np.float64) / total).sum() >= top_p:
                kept = _nucleus_sorted(e, total, top_p, cand)
                cdf = (e[kept].astype(np.float64) / total).cumsum()
                return int(kept[min(int(cdf.searchsorted(u * cdf[-1], side="right")), cdf.shape[0] - 1)])
        return invert_cdf_blocked(nucleus_long(e, total, top_p, ws), u, ws)
    return invert_cdf_blocked(e, u, ws)


def _nucleus(e, total, top_p):
    """Sorted positions kept by top_p, probabilities being e / total (float64). Only tokens of a
    candidate set holding >= top_p of the mass can be kept, so the sort runs over the first such set
    found: the tokens within 1e-2 of the most likely one, else the top 512, 4096, 32768 (with every
    tie), else the whole row. e orders and ties exactly as the probabilities do (float32 -> float64
    division by one positive number is monotone and keeps distinct values distinct)."""
    return _nucleus_sorted(e, total, top_p, _nucleus_candidates(e, total, top_p))


def _nucleus_sorted(e, total, top_p, cand):
    """The kept positions among cand (a set holding every token top_p can keep), sorted."""
    pc = e[cand].astype(np.float64) / total
    order = np.lexsort((cand, -pc))
    po = pc[order]
    above = po.cumsum() - po
    kept = cand[order[above < top_p]]
    kept.sort()
    return kept


def _nucleus_candidates(e, total, top_p):
    n = e.shape[0]
    cand = np.flatnonzero(e >= e.max() * np.float32(1e-2))
    if (e[cand].astype(np.float64) / total).sum() >= top_p:
        return cand
    for m in (512, 4096, 32768):
        if m >= n:
            break
        kth = np.partition(e, n - m)[n - m]
        cand = np.flatnonzero(e >= kth)
        if (e[cand].astype(np.float64) / total).sum() >= top_p:
            return cand
    return np.arange(n)
