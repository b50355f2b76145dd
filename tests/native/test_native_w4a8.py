"""w4a8 (int4 weights x the w8a8 per-token int8 activations, switched on by w8a8=True).

Exact against a numpy model of the integer arithmetic (w4a8_ref.py) on dense int4 matrices;
the same bits on every SIMD level, batch size, row subset and thread count for experts and whole
MoE layers; and a quality bound against the float64 reference on the original weights.
"""
import numpy as np
import pytest

from colibri_dist.native import quantized_matrix, simd_force
from native_helpers import (AVAILABLE_LEVELS, cosine, ffn_ref, rand_expert, random_layer, simd_params, view_of,
                            w8a8_runtimes)
from w4a8_ref import w4a8_matmul

SCHEMES4 = ["int4-g32", "int4-g64"]


@pytest.fixture(scope="module")
def rts():
    yield from w8a8_runtimes()


@pytest.mark.parametrize("level", simd_params())
@pytest.mark.parametrize("scheme", SCHEMES4)
@pytest.mark.parametrize("rows,cols", [(37, 64), (20, 150), (9, 333), (70, 96)])
def test_w4a8_matmul_equals_the_numpy_integer_model(rts, level, scheme, rows, cols):
    rng = np.random.default_rng(rows * cols)
    view = quantized_matrix((rng.standard_normal((rows, cols)) * 0.1).astype(np.float32), scheme)
    x = rng.standard_normal((19, cols)).astype(np.float32)
    x[3] *= 1e-3                                              # a tiny row: its own scale
    x[5] = 0.0                                                # an all-zero row: scale 0, output 0
    ref = w4a8_matmul(x, view)
    with simd_force(level):
        for n in (1, 2, 3, 4, 7, 19):
            assert np.array_equal(rts[2].matmul(np.ascontiguousarray(x[:n]), view), ref[:n]), (level, n)
    assert not np.array_equal(rts["plain"].matmul(x, view), ref)    # the switch really changes the math


@pytest.mark.parametrize("scheme", SCHEMES4)
@pytest.mark.parametrize("hidden,inter", [(64, 32), (150, 83)])
def test_w4a8_expert_same_bits_on_every_level_batch_rows_and_threads(rts, scheme, hidden, inter):
    rng = np.random.default_rng(hidden + inter)
    view = view_of(rand_expert(rng, hidden, inter), scheme)
    x = rng.standard_normal((21, hidden)).astype(np.float32)
    with simd_force("scalar"):
        ref = rts[1].expert_forward(x, view)
    for level in AVAILABLE_LEVELS:
        with simd_force(level):
            for t in (1, 2, 3):
                assert np.array_equal(rts[t].expert_forward(x, view), ref), (level, t)
            for n in (1, 2, 5, 16):
                assert np.array_equal(rts[2].expert_forward(np.ascontiguousarray(x[:n]), view), ref[:n]), (level, n)
            rows = np.array([20, 3, 3, 7, 0])
            assert np.array_equal(rts[3].expert_forward(x, view, rows=rows), ref[rows]), level


@pytest.mark.parametrize("scheme", SCHEMES4 + ["int6-g64"])
def test_w4a8_and_w6a8_moe_layer_is_batch_order_thread_and_level_invariant(rts, scheme):
    rng = np.random.default_rng(4)
    layer = random_layer(rng, hidden=96, inter=64, n_experts=8, top_k=3, shared=True, scheme=scheme)
    x = rng.standard_normal((24, 96)).astype(np.float32)

    def fwd(rt, xx):
        return rt.moe_forward(np.ascontiguousarray(xx), layer["router"], layer["gating"], layer["experts"],
                              shared=layer["shared"], shared_gate=layer["shared_gate"])[0]
    with simd_force("scalar"):
        full = fwd(rts[2], x)
    perm = rng.permutation(24)
    for level in AVAILABLE_LEVELS:
        with simd_force(level):
            for n in (1, 2, 4, 8, 16, 24):
                assert np.array_equal(fwd(rts[1], x[:n]), full[:n]), (level, n)
            assert np.array_equal(fwd(rts[3], x[perm]), full[perm]), level


def test_w4a8_quality_against_the_float_reference(rts):
    """Cosine to the float64 FFN on the original weights: w4a8 stays next to int4 weight-only."""
    rng = np.random.default_rng(8)
    w = rand_expert(rng, 256, 128)
    x = rng.standard_normal((32, 256)).astype(np.float32)
    ref = ffn_ref(x, *w)
    for scheme in SCHEMES4:
        view = view_of(w, scheme)
        c_w = cosine(rts["plain"].expert_forward(x, view), ref)
        c_a = cosine(rts[2].expert_forward(x, view), ref)
        print(f"{scheme}: cosine weight-only {c_w:.6f}, w4a8 {c_a:.6f}")
        assert c_a >= 0.98 and c_a >= c_w - 0.005, (scheme, c_w, c_a)
