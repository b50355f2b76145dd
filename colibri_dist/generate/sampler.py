"""Per-request token sampling: greedy, temperature, top-k, top-p, and logprobs.

Role in the data flow: the scheduler hands each request's last-position logits (float32 [vocab],
straight from the model) to that request's Sampler and gets back the next token (and its logprobs).
Each Sampler owns one numpy Generator seeded from the request's seed (or, without one, from the
caller's base seed and the request id) and consumes exactly one uniform draw per generated token,
so a request's stream never depends on what else is in the batch. All arithmetic is on that one
row in float64, so the result is a function of the logits' bits alone.
"""
import hashlib

import numpy as np

from .outputs import TokenLogprobs


def derive_seed(base_seed, request_id):
    """The seed of a request that has none: stable across runs, processes and Python versions."""
    digest = hashlib.blake2b(f"{int(base_seed)}\x00{request_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def make_rng(params, base_seed=0, request_id=0):
    seed = params.seed if params.seed is not None else derive_seed(base_seed, request_id)
    return np.random.Generator(np.random.PCG64(seed))


class Sampler:
    def __init__(self, params, base_seed=0, request_id=0):
        self.params = params
        self.rng = make_rng(params, base_seed, request_id)

    def sample(self, logits):
        """logits: float32 [vocab] -> (token_id, TokenLogprobs | None)."""
        u = self.rng.random()                    # the one draw of this token, greedy or not
        p = self.params
        if p.greedy:
            token = int(np.argmax(logits))       # first maximum = lowest token id among ties
        else:
            token = _sample_filtered(logits, p.temperature, p.top_k, p.top_p, u)
        lp = token_logprobs(logits, token, p.logprobs) if p.logprobs > 0 else None
        return token, lp


def log_softmax(logits):
    x = np.asarray(logits, dtype=np.float64)
    m = np.max(x)
    return x - (m + np.log(np.sum(np.exp(x - m))))


def token_logprobs(logits, token, n):
    lp = log_softmax(logits)
    chosen = lp[token]
    rank = 1 + int(np.count_nonzero(lp > chosen))
    return TokenLogprobs(int(token), float(chosen), rank, top_n(lp, n))


def top_n(lp, n):
    """The n largest entries of lp as ((id, value), ...), ties ordered by token id."""
    n = min(n, lp.shape[0])
    if n <= 0:
        return ()
    kth = np.partition(lp, lp.shape[0] - n)[lp.shape[0] - n]
    cand = np.flatnonzero(lp >= kth)             # every tie at the threshold, in id order
    order = cand[np.lexsort((cand, -lp[cand]))][:n]
    return tuple((int(i), float(lp[i])) for i in order)


def _sample_filtered(logits, temperature, top_k, top_p, u):
    """vLLM semantics: scale by 1/T, keep the top_k largest (ties with the k-th kept), then the
    smallest most-likely set whose mass reaches top_p (a token is kept when the mass of the tokens
    ranked above it is < top_p; the most likely always stays), renormalize, invert the CDF at u
    over the kept tokens in token-id order."""
    x = np.asarray(logits, dtype=np.float64) / temperature
    keep = np.ones(x.shape[0], dtype=bool)
    if 0 < top_k < x.shape[0]:
        kth = np.partition(x, x.shape[0] - top_k)[x.shape[0] - top_k]
        keep &= x >= kth
    ids = np.flatnonzero(keep)
    z = x[ids]
    probs = np.exp(z - np.max(z))
    probs /= np.sum(probs)
    if top_p < 1.0:
        order = np.lexsort((ids, -probs))        # most likely first, ties by token id
        above = np.cumsum(probs[order]) - probs[order]
        kept = order[above < top_p]
        kept.sort()                              # back to token-id order (ids is sorted)
        ids, probs = ids[kept], probs[kept]
    cdf = np.cumsum(probs)
    j = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return int(ids[min(j, ids.shape[0] - 1)])
