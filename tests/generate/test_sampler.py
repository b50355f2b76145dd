"""Sampler: greedy ties, top-k/top-p semantics, logprobs, one draw per token, seeds."""
import numpy as np
import pytest

from colibri_dist.generate import SamplingParams
from colibri_dist.generate.sampler import LONG_ROW, Sampler, _sample_filtered, derive_seed, log_softmax, token_logprobs, top_n


def test_greedy_ties_go_to_lowest_id():
    logits = np.array([0.0, 2.0, 1.0, 2.0, 2.0], dtype=np.float32)
    tok, lp = Sampler(SamplingParams(temperature=0)).sample(logits)
    assert tok == 1 and lp is None


def test_logprobs_top_n_ties_by_id_and_rank():
    logits = np.array([1.0, 3.0, 3.0, 0.5, 3.0, 2.0], dtype=np.float32)
    tok, lp = Sampler(SamplingParams(temperature=0, logprobs=4)).sample(logits)
    ref = log_softmax(logits)
    assert tok == 1 and lp.token_id == 1 and lp.logprob == float(ref[1]) and lp.rank == 1
    assert [t for t, _ in lp.top] == [1, 2, 4, 5]
    assert [v for _, v in lp.top] == [float(ref[i]) for i in (1, 2, 4, 5)]
    assert np.isclose(np.exp(ref).sum(), 1.0)


def test_chosen_rank_when_sampled_low():
    lp = log_softmax(np.array([0.0, 1.0, 2.0]))
    assert top_n(lp, 10) == ((2, float(lp[2])), (1, float(lp[1])), (0, float(lp[0])))


def test_one_draw_per_token_any_mode():
    logits = np.linspace(-1, 1, 10).astype(np.float32)
    for params in (SamplingParams(seed=5, temperature=0), SamplingParams(seed=5, temperature=0.8, top_k=3, top_p=0.5)):
        s = Sampler(params)
        for _ in range(7):
            s.sample(logits)
        ref = np.random.Generator(np.random.PCG64(5))
        ref.random(7)
        assert s.rng.random() == ref.random()


def test_top_k_and_top_p_support():
    logits = np.array([5.0, 4.0, 3.0, 2.9, -1.0, -9.0], dtype=np.float32)
    seen_k = {Sampler(SamplingParams(temperature=1.0, top_k=2, seed=s)).sample(logits)[0] for s in range(200)}
    assert seen_k == {0, 1}
    p = np.exp(log_softmax(logits))
    # top_p just above p0 keeps exactly tokens 0 and 1 (mass above token 1 = p0 < top_p)
    seen_p = {Sampler(SamplingParams(temperature=1.0, top_p=float(p[0]) + 1e-6, seed=s)).sample(logits)[0]
              for s in range(200)}
    assert seen_p == {0, 1}
    seen_1 = {Sampler(SamplingParams(temperature=1.0, top_p=float(p[0]) * 0.5, seed=s)).sample(logits)[0]
              for s in range(50)}
    assert seen_1 == {0}


def test_top_k_keeps_ties_at_threshold():
    logits = np.array([3.0, 1.0, 1.0, 1.0, -5.0], dtype=np.float32)
    seen = {Sampler(SamplingParams(temperature=2.0, top_k=2, seed=s)).sample(logits)[0] for s in range(300)}
    assert seen == {0, 1, 2, 3}


def test_sampling_frequencies_follow_softmax():
    logits = np.array([1.0, 0.0, -1.0], dtype=np.float32)
    s = Sampler(SamplingParams(temperature=1.0, seed=11))
    counts = np.bincount([s.sample(logits)[0] for _ in range(6000)], minlength=3) / 6000
    assert np.allclose(counts, np.exp(log_softmax(logits)), atol=0.03)


def test_seeds():
    logits = np.zeros(1000, dtype=np.float32)
    a = [Sampler(SamplingParams(temperature=1.0, seed=9)).sample(logits)[0] for _ in range(3)]
    assert len(set(a)) == 1
    assert derive_seed(0, "row-1") == derive_seed(0, "row-1") != derive_seed(1, "row-1")
    x = Sampler(SamplingParams(temperature=1.0), base_seed=3, request_id="r").sample(logits)[0]
    y = Sampler(SamplingParams(temperature=1.0), base_seed=3, request_id="r").sample(logits)[0]
    assert x == y
    assert derive_seed(0, 1) == 9620783941981340731   # pinned: derived seeds must not change between releases


def _reference_sample(x, temperature, top_k, top_p, u, min_p=0.0):
    """The definition, on the whole row with full sorts (what the shortcuts must reproduce exactly)."""
    z = x.astype(np.float32) / np.float32(temperature)
    if min_p > 0.0:
        z = np.where(np.exp(z - z.max()) >= np.float32(min_p), z, np.float32(-np.inf)).astype(np.float32)
    ids = np.arange(z.shape[0])
    if 0 < top_k < z.shape[0]:
        kth = np.sort(z)[::-1][top_k - 1]
        ids = np.flatnonzero(z >= kth)
    e = np.exp(z[ids] - np.max(z[ids]))
    probs = e.astype(np.float64) / np.sum(e, dtype=np.float64)
    if top_p < 1.0:
        pos = np.arange(probs.shape[0])
        order = pos[np.lexsort((pos, -probs))]
        above = np.cumsum(probs[order]) - probs[order]
        keep = np.sort(order[above < top_p])
        ids, probs = ids[keep], probs[keep]
    cdf = np.cumsum(probs)
    return int(ids[min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), ids.shape[0] - 1)])


@pytest.mark.parametrize("scale", [0.3, 3.0, 30.0])
def test_shortcuts_equal_the_definition(scale):
    rng = np.random.default_rng(int(scale * 10))
    for trial in range(60):
        v = int(rng.integers(2, 3000))
        x = (rng.standard_normal(v) * scale).astype(np.float32)
        if trial % 3 == 0:
            x = np.round(x).astype(np.float32)            # many exact ties
        t = float(rng.choice([0.2, 0.7, 1.0, 1.6]))
        k = int(rng.choice([0, 1, 2, 5, 40, v]))
        p = float(rng.choice([1.0, 0.999, 0.9, 0.5, 0.05]))
        u = float(rng.random())
        assert _sample_filtered(x, t, k, p, u) == _reference_sample(x, t, k, p, u)
        n = int(rng.integers(1, 25))
        lp = log_softmax(x)
        full = np.lexsort((np.arange(v), -lp))[:n]
        assert top_n(lp, n) == tuple((int(i), float(lp[i])) for i in full)
        tl = token_logprobs(x, int(full[0]), n)
        assert tl.top == top_n(lp, n) and tl.logprob == float(lp[full[0]]) and tl.rank == 1


def test_long_rows_equal_the_definition():
    """Rows past LONG_ROW (a real vocabulary) take the binned nucleus and the blocked CDF: the same
    tokens as the definition (their sums run in another order; on these rows no draw lands within
    rounding of a boundary). Flat rows (nucleus = most of the row), peaked rows, ties, min_p, top_k."""
    rng = np.random.default_rng(7)
    for trial in range(24):
        v = int(rng.integers(LONG_ROW + 1, 3 * LONG_ROW))
        x = (rng.standard_normal(v) * float(rng.choice([0.5, 2.0, 8.0]))).astype(np.float32)
        if trial % 3 == 0:
            x = np.round(x).astype(np.float32)            # many exact ties (also at the nucleus edge)
        t, p = float(rng.choice([0.3, 0.8, 1.5])), float(rng.choice([1.0, 0.999, 0.9, 0.5, 0.05]))
        k = int(rng.choice([0, 0, LONG_ROW + 7]))
        mp = float(rng.choice([0.0, 0.0, 0.01]))
        for u in rng.random(3):
            assert _sample_filtered(x, t, k, p, float(u), mp) == _reference_sample(x, t, k, p, float(u), mp)
    wide = np.round(rng.standard_normal(20000) * 10).astype(np.float32)   # most of the row past 2^-24 of
    for u in rng.random(3):                                               # the max, the edge in that tail
        assert _sample_filtered(wide, 0.7, 0, 0.999, float(u)) == _reference_sample(wide, 0.7, 0, 0.999, float(u))
