"""Attention sinks (gpt-oss): each head's learned logit joins its softmax denominator and its probability is
dropped. Paged-KV attention with sinks vs a numpy reference (GQA, sliding window, f16 cache), exact invariance
(threads, SIMD level, other sequences, prompt chunking), and bad sinks refused naming the head."""
import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument, NativeError
from colibri_dist.native import simd_force
from test_native_attention import GQA, PATHS, Cache, rounded, rts, sequence, spec_of  # noqa: F401  (rts: fixture)

SINKS = np.array([2.5, -1.0, 0.0, 4.0, -3.0, 1.5], np.float32)     # one per query head of GQA (6)


class SinkCache(Cache):
    def attend(self, rt, seqs, q):
        start, pos0, tables = self._args(seqs)
        return rt.attention(self.spec, self.k, self.v, start, pos0, tables, q, sinks=SINKS)


def ref_attention(spec, q, k, v, sinks):
    P, G = q.shape[0], spec.n_heads // spec.n_kv_heads
    out = np.zeros((P, spec.n_heads, spec.v_dim))
    for p in range(P):
        lo = max(0, p - spec.window + 1) if spec.window else 0
        for h in range(spec.n_heads):
            s = k[lo:p + 1, h // G].astype(np.float64) @ q[p, h] * spec.scale
            m = max(s.max(), float(sinks[h]))
            w = np.exp(s - m)
            out[p, h] = (w / (w.sum() + np.exp(sinks[h] - m))) @ v[lo:p + 1, h // G, :spec.v_dim]
    return out


CASES = [("gqa", {}), ("gqa-window", dict(window=5)), ("gqa-f16-window", dict(cache_dtype="f16", window=3))]


@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
def test_sinks_match_numpy_reference(rts, name, kw):
    spec = spec_of(GQA, **kw)
    q, k, v = sequence(np.random.default_rng(1), spec, 23)
    cache = SinkCache(spec, 16)
    cache.write([(0, 0, 23)], k, v)
    out = cache.attend(rts[2], [(0, 0, 23)], q)
    ref = ref_attention(spec, q, rounded(k, spec.cache_dtype), rounded(v, spec.cache_dtype), SINKS)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    plain = Cache(spec, 16)                        # the sinks change the result: the weights no longer sum to 1
    plain.write([(0, 0, 23)], k, v)
    assert np.abs(plain.attend(rts[2], [(0, 0, 23)], q) - out).max() > 0.05


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
def test_sinks_are_exactly_invariant(rts, path, name, kw):
    spec = spec_of(GQA, **kw)
    rng = np.random.default_rng(2)
    q, k, v = sequence(rng, spec, 21)
    whole = SinkCache(spec, 40)
    whole.write([(0, 0, 21)], k, v)
    ref = whole.attend(rts[2], [(0, 0, 21)], q)
    with simd_force(path):
        assert np.array_equal(whole.attend(rts[1], [(0, 0, 21)], q), ref)
        other = sequence(rng, spec, 30)
        mixed = SinkCache(spec, 40, seed=5)
        mixed.write([(1, 0, 30), (0, 0, 21)], np.concatenate([other[1], k]), np.concatenate([other[2], v]))
        assert np.array_equal(mixed.attend(rts[2], [(1, 0, 30), (0, 0, 21)], np.concatenate([other[0], q]))[30:], ref)
        chunked = SinkCache(spec, 40, seed=3)
        parts = []
        for a, b in zip([0, 9, 10], [9, 10, 21]):
            chunked.write([(0, a, b - a)], k[a:b], v[a:b])
            parts.append(chunked.attend(rts[1 + a % 2], [(0, a, b - a)], np.ascontiguousarray(q[a:b])))
        assert np.array_equal(np.concatenate(parts), ref)


def test_bad_sinks_are_refused(rts):
    cache = Cache(GQA, 8)
    q, k, v = sequence(np.random.default_rng(3), GQA, 4)
    cache.write([(0, 0, 4)], k, v)
    start, pos0, tables = cache._args([(0, 0, 4)])
    with pytest.raises(InvalidArgument, match="sinks"):
        rts[1].attention(GQA, cache.k, cache.v, start, pos0, tables, q, sinks=SINKS[:5])
    bad = SINKS.copy()
    bad[3] = np.inf
    with pytest.raises(NativeError, match=r"sinks\[3\] is not finite"):
        rts[1].attention(GQA, cache.k, cache.v, start, pos0, tables, q, sinks=bad)
