"""Property test of paged-KV attention over random geometries: GQA/MQA/MHA/MLA, block sizes, windows, cache
dtypes, sequence lengths and prompt splits. Every split and batch gives exactly the bits of one call per
sequence, and that call is within float tolerance of the numpy reference."""
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from colibri_dist.native import AttnSpec, Runtime
from test_native_attention import Cache, ref_attention, rounded, sequence

RT = {t: Runtime(threads=t) for t in (1, 2)}


@st.composite
def cases(draw):
    kv = draw(st.sampled_from([1, 2, 3]))
    mla = kv == 1 and draw(st.booleans())
    qk = draw(st.integers(1, 40))
    v_dim = draw(st.integers(1, qk - 1)) if mla and qk > 1 else draw(st.integers(1, 20))
    spec = AttnSpec(n_heads=kv * draw(st.integers(1, 4)), n_kv_heads=kv, qk_dim=qk, v_dim=v_dim,
                    v_row=qk if mla else v_dim + draw(st.integers(0, 3)), block_size=draw(st.sampled_from([1, 3, 8, 16])),
                    cache_dtype=draw(st.sampled_from(["f32", "f16", "bf16"])),
                    window=draw(st.sampled_from([0, 1, 4, 9])), scale=draw(st.floats(0.05, 1.0)))
    lens = draw(st.lists(st.integers(1, 80), min_size=1, max_size=3))
    cuts = [sorted(set(draw(st.lists(st.integers(1, n - 1), max_size=3)))) if n > 1 else [] for n in lens]
    return spec, lens, cuts, draw(st.integers(0, 2**31 - 1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_any_split_equals_one_call_and_the_reference(case):
    spec, lens, cuts, seed = case
    if spec.v_row == spec.qk_dim and spec.n_kv_heads == 1 and spec.v_dim >= spec.qk_dim:
        return
    rng = np.random.default_rng(seed)
    data = [sequence(rng, spec, n) for n in lens]
    n_blocks = sum(n // spec.block_size + 1 for n in lens)
    alone = []
    for s, (q, k, v) in enumerate(data):                               # one call per sequence
        c = Cache(spec, n_blocks, seed=s)
        c.write([(s, 0, len(q))], k, v)
        alone.append(c.attend(RT[1], [(s, 0, len(q))], q))
        vv = k if c.shared else v
        ref = ref_attention(spec, q, rounded(k, spec.cache_dtype), rounded(vv, spec.cache_dtype))
        np.testing.assert_allclose(alone[-1], ref, rtol=2e-5, atol=2e-5)
    batch = Cache(spec, n_blocks, seed=99)                             # all sequences together, split at cuts
    edges = [[0] + c + [n] for c, n in zip(cuts, lens)]
    got = [[] for _ in lens]
    for step in range(max(len(e) - 1 for e in edges)):
        seqs = [(s, e[step], e[step + 1] - e[step]) for s, e in enumerate(edges) if step + 1 < len(e)]
        cat = [np.concatenate([data[s][i][a:a + n] for s, a, n in seqs]) for i in range(3)]
        batch.write(seqs, cat[1], cat[2])
        out = batch.attend(RT[2], seqs, cat[0])
        at = 0
        for s, _, n in seqs:
            got[s].append(out[at:at + n])
            at += n
    for s in range(len(lens)):
        assert np.array_equal(np.concatenate(got[s]), alone[s])
