"""Paged-KV attention + kv_write vs a straightforward numpy causal attention (GQA, sliding window, MLA-style
shared V, f16/bf16 cache), exact invariance (other sequences, prompt chunking, threads, SIMD level) and errors."""
import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument, NativeError
from colibri_dist.format.quantize import bf16_bits_to_f32, f32_to_bf16_bits
from colibri_dist.native import AttnSpec, Runtime, kv_write, simd_force, simd_name

PATHS = sorted({"scalar", simd_name()})          # portable C and the detected level
GQA = AttnSpec(n_heads=6, n_kv_heads=2, qk_dim=20, v_dim=12, v_row=16, block_size=4, scale=0.3)
MLA = AttnSpec(n_heads=5, n_kv_heads=1, qk_dim=24, v_dim=16, v_row=24, block_size=8, scale=0.25)


@pytest.fixture(scope="module")
def rts():
    r = {t: Runtime(threads=t) for t in (1, 2)}
    yield r
    for rt in r.values():
        rt.close()


class Cache:
    """One layer's pools filled with NaN words (a masked or unwritten slot must never reach a result),
    blocks handed to sequences in a shuffled order."""

    def __init__(self, spec, n_blocks, seed=0):
        self.spec, self.shared = spec, spec.v_row == spec.qk_dim and spec.n_kv_heads == 1
        dt = np.float32 if spec.cache_dtype == "f32" else np.uint16
        nan = np.float32("nan") if dt == np.float32 else (0x7e00 if spec.cache_dtype == "f16" else 0x7fc0)
        self.k = np.full((n_blocks, spec.n_kv_heads, spec.block_size, spec.qk_dim), nan, dt)
        self.v = self.k if self.shared else np.full((n_blocks, spec.n_kv_heads, spec.block_size, spec.v_row), nan, dt)
        self.free = list(np.random.default_rng(seed).permutation(n_blocks))
        self.tables = {}

    def table(self, seq, n_pos):
        t = self.tables.setdefault(seq, [])
        while len(t) * self.spec.block_size < n_pos:
            t.append(self.free.pop())
        return np.array(t, np.int32)

    def write(self, seqs, k, v):
        """seqs: [(seq id, pos0, n_tok)] in token order."""
        start, pos0, tables = self._args(seqs)
        kv_write(self.spec, self.k, self.v, start, pos0, tables, k, None if self.shared else v)

    def attend(self, rt, seqs, q):
        start, pos0, tables = self._args(seqs)
        return rt.attention(self.spec, self.k, self.v, start, pos0, tables, q)

    def _args(self, seqs):
        start = np.cumsum([0] + [n for _, _, n in seqs])
        return start, [p for _, p, _ in seqs], [self.table(s, p + n) for s, p, n in seqs]


def rounded(a, dtype):
    if dtype == "f16":
        return a.astype(np.float16).astype(np.float32)
    return bf16_bits_to_f32(f32_to_bf16_bits(a)).reshape(a.shape) if dtype == "bf16" else a


def ref_attention(spec, q, k, v):
    """One sequence from position 0: q [P, H, qk], k [P, KV, qk], v [P, KV, >= v_dim] (already rounded)."""
    P, G = q.shape[0], spec.n_heads // spec.n_kv_heads
    out = np.zeros((P, spec.n_heads, spec.v_dim))
    for p in range(P):
        lo = max(0, p - spec.window + 1) if spec.window else 0
        for h in range(spec.n_heads):
            s = k[lo:p + 1, h // G].astype(np.float64) @ q[p, h] * spec.scale
            w = np.exp(s - s.max())
            out[p, h] = (w / w.sum()) @ v[lo:p + 1, h // G, :spec.v_dim]
    return out


def sequence(rng, spec, n):
    q = rng.standard_normal((n, spec.n_heads, spec.qk_dim)).astype(np.float32)
    k = rng.standard_normal((n, spec.n_kv_heads, spec.qk_dim)).astype(np.float32)
    v = rng.standard_normal((n, spec.n_kv_heads, spec.v_row)).astype(np.float32)
    return q, k, v


def spec_of(base, **kw):
    return AttnSpec(**{**base.__dict__, **kw})


CASES = [("gqa", GQA, {}), ("gqa-window", GQA, dict(window=5)), ("mha-f16", GQA, dict(n_kv_heads=6, cache_dtype="f16")),
         ("gqa-bf16-window", GQA, dict(cache_dtype="bf16", window=7)), ("mla", MLA, {}),
         ("mla-f16-window", MLA, dict(cache_dtype="f16", window=9))]


@pytest.mark.parametrize("name,base,kw", CASES, ids=[c[0] for c in CASES])
def test_attention_matches_numpy_reference(rts, name, base, kw):
    spec = spec_of(base, **kw)
    rng = np.random.default_rng(1)
    q, k, v = sequence(rng, spec, 23)
    cache = Cache(spec, 16)
    cache.write([(0, 0, 23)], k, v)
    out = cache.attend(rts[2], [(0, 0, 23)], q)
    vv = k if cache.shared else v
    ref = ref_attention(spec, q, rounded(k, spec.cache_dtype), rounded(vv, spec.cache_dtype))
    assert out.shape == (23, spec.n_heads, spec.v_dim)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name,base,kw", CASES, ids=[c[0] for c in CASES])
def test_attention_is_exactly_invariant(rts, path, name, base, kw):
    spec = spec_of(base, **kw)
    rng = np.random.default_rng(2)
    q, k, v = sequence(rng, spec, 21)
    whole = Cache(spec, 40)
    whole.write([(0, 0, 21)], k, v)
    ref = whole.attend(rts[2], [(0, 0, 21)], q)
    with simd_force(path):
        assert np.array_equal(whole.attend(rts[1], [(0, 0, 21)], q), ref)          # threads, SIMD level
        others = [sequence(rng, spec, n) for n in (3, 30)]                            # beside other sequences
        mixed = Cache(spec, 40, seed=5)
        seqs = [(1, 0, 3), (0, 0, 21), (2, 0, 30)]
        mixed.write(seqs, *[np.concatenate(p) for p in zip(others[0], (q, k, v), others[1])][1:])
        out = mixed.attend(rts[2], seqs, np.concatenate([others[0][0], q, others[1][0]]))
        assert np.array_equal(out[3:24], ref)
        for cuts in ([0, 9, 10, 21], list(range(22))):                                # chunks, token by token
            chunked = Cache(spec, 40, seed=len(cuts))
            parts = []
            for a, b in zip(cuts, cuts[1:]):
                chunked.write([(0, a, b - a)], k[a:b], v[a:b])
                parts.append(chunked.attend(rts[1 + a % 2], [(0, a, b - a)], np.ascontiguousarray(q[a:b])))
            assert np.array_equal(np.concatenate(parts), ref)


def test_decode_batch_of_sequences_at_different_positions(rts):
    """One decode step for three sequences of different lengths == each sequence's last row alone."""
    rng = np.random.default_rng(3)
    spec = spec_of(GQA, cache_dtype="bf16")
    cache = Cache(spec, 64)
    data = {s: sequence(rng, spec, n) for s, n in ((0, 9), (1, 17), (2, 1))}
    for s, (q, k, v) in data.items():
        n = len(q)
        cache.write([(s, 0, n - 1)], k[:-1], v[:-1])
    step = [(s, len(d[0]) - 1, 1) for s, d in data.items()]
    cache.write(step, *[np.concatenate([d[i][-1:] for d in data.values()]) for i in (1, 2)])
    out = cache.attend(rts[2], step, np.concatenate([d[0][-1:] for d in data.values()]))
    for i, (s, (q, k, v)) in enumerate(data.items()):
        alone = cache.attend(rts[1], [(s, 0, len(q))], q)
        assert np.array_equal(out[i], alone[-1])


def test_kv_write_rounds_to_nearest_even():
    rng = np.random.default_rng(4)
    vals = np.concatenate([rng.standard_normal(40) * 1e3, [65519.0, 65520.0, 1e-8, 2.0**-25, -0.0, 1 + 2.0**-11],
                           rng.standard_normal(6) * 1e-6]).astype(np.float32)[:52].reshape(1, 1, 52)
    with np.errstate(over="ignore"):                                        # 65520 -> inf on purpose
        f16 = vals.astype(np.float16).view(np.uint16)
    for dtype, ref in (("f16", f16), ("bf16", f32_to_bf16_bits(vals))):
        spec = AttnSpec(1, 1, 52, 4, 4, 2, dtype)
        cache = Cache(spec, 2)
        cache.write([(0, 1, 1)], vals, np.ones((1, 1, 4), np.float32))
        blk = cache.tables[0][0]
        assert np.array_equal(cache.k[blk, 0, 1], ref.reshape(-1))
        assert np.all(cache.v[blk, 0, 1] == {"f16": 0x3c00, "bf16": 0x3f80}[dtype])     # 1.0


def test_attention_and_kv_write_errors(rts):
    spec = GQA
    rng = np.random.default_rng(5)
    q, k, v = sequence(rng, spec, 6)
    cache = Cache(spec, 4)
    cache.write([(0, 0, 6)], k, v)
    t = cache.tables[0]
    bad = np.array([t[0], 9], np.int32)
    with pytest.raises(NativeError, match=r"block_tables\[0\]\[1\] = 9 outside \[0, 4\)"):
        rts[1].attention(spec, cache.k, cache.v, [0, 6], [0], [bad], q)
    with pytest.raises(NativeError, match=r"position 5 needs block_tables\[0\]\[1\] but n_table\[0\] = 1"):
        rts[1].attention(spec, cache.k, cache.v, [0, 6], [0], [np.array(t[:1])], q)
    with pytest.raises(NativeError, match=r"position 8 needs block_tables\[0\]\[2\]"):
        kv_write(spec, cache.k, cache.v, [0, 1], [8], [np.array(t)], k[:1], v[:1])
    with pytest.raises(InvalidArgument, match="k_cache must be uint16 or float16"):
        rts[1].attention(spec_of(spec, cache_dtype="f16"), cache.k, cache.v, [0, 6], [0], [np.array(t)], q)
    with pytest.raises(InvalidArgument, match="q must be float32"):
        rts[1].attention(spec, cache.k, cache.v, [0, 6], [0], [np.array(t)], q.astype(np.float64))
    with pytest.raises(InvalidArgument, match="q has shape"):
        rts[1].attention(spec, cache.k, cache.v, [0, 5], [0], [np.array(t)], q)
    with pytest.raises(InvalidArgument, match="cache_dtype"):
        spec_of(spec, cache_dtype="f8")
    with pytest.raises(InvalidArgument, match="AttnSpec.qk_dim"):
        spec_of(spec, qk_dim=20.0)
    with pytest.raises(InvalidArgument, match="AttnSpec.scale"):
        spec_of(spec, scale=float("inf"))
    with pytest.raises(NativeError, match="multiple of n_kv_heads"):
        rts[1].attention(spec_of(spec, n_heads=5), cache.k, cache.v, [0, 6], [0], [np.array(t)], q[:, :5].copy())
    with pytest.raises(InvalidArgument, match="pos0\\[0\\] = -1"):
        kv_write(spec, cache.k, cache.v, [0, 1], [-1], [np.array(t)], k[:1], v[:1])
    with pytest.raises(InvalidArgument, match="v is None"):
        kv_write(spec, cache.k, cache.v, [0, 1], [0], [np.array(t)], k[:1])
    with pytest.raises(NativeError, match=r"seq_start\[2\] = 1 < seq_start\[1\] = 2"):
        kv_write(spec, cache.k, cache.v, [0, 2, 1], [0, 0], [np.array(t), np.array(t)], k[:1], v[:1])
    with pytest.raises(InvalidArgument, match="non-decreasing"):
        kv_write(spec, cache.k, cache.v, [1, 0], [0], [np.array(t)], k[:0], v[:0])


def test_no_arena_growth_after_warm_up():
    rng = np.random.default_rng(6)
    q, k, v = sequence(rng, GQA, 12)
    cache = Cache(GQA, 8)
    cache.write([(0, 0, 12)], k, v)
    with Runtime(threads=2) as rt:
        cache.attend(rt, [(0, 0, 12)], q)                                   # warm-up: the widest call first
        before = rt.stats()["arena_mallocs"]
        for n in (1, 5, 12):
            cache.attend(rt, [(0, 12 - n, n)], np.ascontiguousarray(q[-n:]))
        assert rt.stats()["arena_mallocs"] == before


@pytest.mark.parametrize("window", [0, 100])
def test_long_context_crosses_value_blocks(rts, window):
    """150 positions: several 64-row value blocks, unaligned chunk edges; reference, chunked and SIMD agree."""
    spec = spec_of(GQA, cache_dtype="f16", window=window, block_size=16)
    rng = np.random.default_rng(7)
    q, k, v = sequence(rng, spec, 150)
    whole = Cache(spec, 16)
    whole.write([(0, 0, 150)], k, v)
    out = whole.attend(rts[2], [(0, 0, 150)], q)
    ref = ref_attention(spec, q, rounded(k, "f16"), rounded(v, "f16"))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    for path in PATHS:
        with simd_force(path):
            chunked = Cache(spec, 16, seed=3)
            parts = []
            for a, b in ((0, 70), (70, 71), (71, 150)):
                chunked.write([(0, a, b - a)], k[a:b], v[a:b])
                parts.append(chunked.attend(rts[1], [(0, a, b - a)], np.ascontiguousarray(q[a:b])))
            assert np.array_equal(np.concatenate(parts), out)


def test_kv_write_conversion_matches_numpy_on_every_half_and_random_floats():
    rng = np.random.default_rng(8)
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = halves[np.isfinite(halves)].astype(np.float32)
    mids = (finite[:-1].astype(np.float64) + np.diff(finite.astype(np.float64)) / 2).astype(np.float32)  # ties
    rand = (rng.standard_normal(20000) * np.exp2(rng.integers(-30, 20, 20000))).astype(np.float32)
    vals = np.concatenate([finite, mids, rand, np.float32([np.inf, -np.inf, 7e4, -7e4])])
    vals = np.concatenate([vals, np.zeros(-vals.size % 64, np.float32)]).reshape(-1, 1, 64)
    spec16, spec_b = AttnSpec(1, 1, 64, 1, 1, 1, "f16"), AttnSpec(1, 1, 64, 1, 1, 1, "bf16")
    n = vals.shape[0]
    for spec, want in ((spec16, None), (spec_b, f32_to_bf16_bits(vals).reshape(n, 64))):
        k_cache = np.zeros((n, 1, 1, 64), np.uint16)
        v_cache = np.zeros((n, 1, 1, 1), np.uint16)
        kv_write(spec, k_cache, v_cache, [0, n], [0], [np.arange(n, dtype=np.int32)], vals,
                 np.zeros((n, 1, 1), np.float32))
        if want is None:
            with np.errstate(over="ignore"):
                want = vals.astype(np.float16).view(np.uint16).reshape(n, 64)
        assert np.array_equal(k_cache.reshape(n, 64), want)
