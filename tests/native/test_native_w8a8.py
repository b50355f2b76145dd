"""Opt-in w8a8 (int8 weights x per-token int8 activations): invariance, both SIMD paths, accuracy, pieces."""
import numpy as np
import pytest

from colibri_dist.native import Runtime, combine, simd_force, simd_name
from native_helpers import AVAILABLE_LEVELS, simd_params, cosine, decoded, ffn_ref, rand_expert, random_layer, view_of

PATHS = simd_params()


@pytest.fixture(scope="module")
def rts():
    r = {t: Runtime(threads=t, w8a8=True) for t in (1, 2, 3)}
    yield r
    for v in r.values():
        v.close()


def _forward(rt, layer, x):
    return rt.moe_forward(x, layer["router"], layer["gating"], layer["experts"], shared=layer.get("shared"),
                          shared_gate=layer.get("shared_gate"))


@pytest.mark.parametrize("hidden,inter", [(64, 32), (77, 45)])
def test_w8a8_is_close_to_the_f32_reference_and_path_independent(rts, hidden, inter):
    rng = np.random.default_rng(hidden)
    view = view_of(rand_expert(rng, hidden, inter), "int8")
    x = rng.standard_normal((13, hidden)).astype(np.float32)
    outs = {}
    for path in AVAILABLE_LEVELS:
        with simd_force(path):
            outs[path] = rts[2].expert_forward(x, view)
    assert all(np.array_equal(o, outs["scalar"]) for o in outs.values())
    ref = ffn_ref(x, *decoded(view))
    assert cosine(outs["scalar"], ref) >= 0.999
    with Runtime(threads=2) as plain:
        assert not np.array_equal(plain.expert_forward(x, view), outs["scalar"])  # the mode really changes the math


def test_w8a8_batch_order_thread_invariance_and_pieces(rts):
    rng = np.random.default_rng(9)
    layer = random_layer(rng, hidden=80, inter=48, n_experts=8, top_k=3, shared=True, scheme="int8")
    x = rng.standard_normal((21, 80)).astype(np.float32)
    full, idx, w = _forward(rts[2], layer, x)
    for n in (1, 4, 21):
        assert np.array_equal(_forward(rts[1], layer, np.ascontiguousarray(x[:n]))[0], full[:n])
    perm = rng.permutation(21)
    assert np.array_equal(_forward(rts[3], layer, np.ascontiguousarray(x[perm]))[0], full[perm])
    slot = np.zeros((21, 3, 80), np.float32)
    for e in np.unique(idx):
        t, j = np.nonzero(idx == e)
        slot[t, j] = rts[1].expert_forward(x, layer["experts"][e], rows=t)
    shared = rts[3].shared_forward(x, layer["shared"], layer["shared_gate"])
    assert np.array_equal(combine(w, slot, shared), full)


def test_w8a8_leaves_other_schemes_on_the_f32_path(rts):
    rng = np.random.default_rng(10)
    view = view_of(rand_expert(rng, 64, 32), "int8-g32")
    x = rng.standard_normal((5, 64)).astype(np.float32)
    with Runtime(threads=1) as plain:
        assert np.array_equal(plain.expert_forward(x, view), rts[1].expert_forward(x, view))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 16, 19])
def test_w8a8_every_simd_level_equals_scalar(rts, path, n):
    rng = np.random.default_rng(40 + n)
    view = view_of(rand_expert(rng, 150, 83), "int8")       # K tails off every vector width
    x = rng.standard_normal((n, 150)).astype(np.float32)
    with simd_force("scalar"):
        ref = rts[2].expert_forward(x, view)
    with simd_force(path):
        assert np.array_equal(rts[2].expert_forward(x, view), ref)


@pytest.mark.parametrize("path", PATHS)
def test_w8a8_long_rows_equal_scalar(rts, path):
    """K above the AVX-512 vpdpbusd limit (8192) takes the vpdpwssd tiles: same bits."""
    rng = np.random.default_rng(77)
    view = view_of(rand_expert(rng, 8200, 20), "int8")
    x = rng.standard_normal((6, 8200)).astype(np.float32)
    with simd_force("scalar"):
        ref = rts[2].expert_forward(x, view)
    with simd_force(path):
        for n in (1, 2, 3, 6):
            assert np.array_equal(rts[2].expert_forward(np.ascontiguousarray(x[:n]), view), ref[:n])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("hidden,inter", [(192, 128), (128, 88)])
def test_w8a8_tile_shapes_equal_scalar(rts, path, hidden, inter):
    """K a multiple of 64 (the amx level's tile path), 16-row tiles with remainders, partial 16-token blocks."""
    rng = np.random.default_rng(hidden + inter)
    view = view_of(rand_expert(rng, hidden, inter), "int8")
    x = rng.standard_normal((40, hidden)).astype(np.float32)
    with simd_force("scalar"):
        ref = rts[2].expert_forward(x, view)
    with simd_force(path):
        for n in (1, 5, 16, 17, 40):
            assert np.array_equal(rts[3].expert_forward(np.ascontiguousarray(x[:n]), view), ref[:n]), n
