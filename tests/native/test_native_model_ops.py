"""Whole-model ops vs numpy/torch references (matmul on every encoding, rmsnorm, embed, rope, log_softmax),
exact batch / thread / SIMD invariance of the dense products, and the bad-argument paths."""
import numpy as np
import pytest
import torch

from colibri_dist.errors import InvalidArgument, NativeError
from colibri_dist.format.layout import MatrixLayout
from colibri_dist.format.quantize import dequantize, pack_expert
from colibri_dist.native import (Runtime, embed, log_softmax, matrix_from_array, matrix_view, quantized_matrix,
                                 rmsnorm, rope_apply, simd_force, simd_name)
from native_helpers import SCHEMES

EMBED_SCHEMES = ["f32", "f16", "bf16", "int8", "int8-g32", "int8-g64", "int8-g128", "int8-minmax",   # cb_embed's decoders
                 "int6-g64", "q8_0"]

PATHS = sorted({"scalar", simd_name()})          # portable C and the detected level


@pytest.fixture(scope="module")
def rts():
    r = {t: Runtime(threads=t) for t in (1, 2)}
    yield r
    for rt in r.values():
        rt.close()


def quantized(rng, rows, cols, scheme):
    """(MatrixView, decoded float64 reference) of a random matrix in `scheme` (the gate part of a packed blob)."""
    w = (rng.standard_normal((rows, cols)) * 0.3).astype(np.float32)
    blob, layout = pack_expert(w, w, w.T.copy(), scheme)
    return matrix_view(blob, layout.gate), dequantize(blob, layout.gate).astype(np.float64)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_matmul_each_encoding_vs_dequantized_reference(rts, scheme):
    rng = np.random.default_rng(1)
    view, ref_w = quantized(rng, 70, 45, scheme)
    bias = rng.standard_normal(70).astype(np.float32)
    x = rng.standard_normal((37, 45)).astype(np.float32)
    y = rts[2].matmul(x, view, bias)
    ref = x.astype(np.float64) @ ref_w.T + bias
    assert y.shape == (37, 70) and y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    nobias = rts[1].matmul(x, view)
    assert np.array_equal(nobias + bias, y)                                   # out = dot + bias, one rounding each


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("scheme", ["f32", "bf16", "int8", "int8-g32", "int8-minmax"])
def test_matmul_rows_invariant_to_batch_threads_and_simd(rts, path, scheme):
    rng = np.random.default_rng(2)
    view, _ = quantized(rng, 131, 67, scheme)         # 131 rows: a partial 64-row block and odd kernel tiles
    x = rng.standard_normal((37, 67)).astype(np.float32)
    full = rts[2].matmul(x, view)
    with simd_force(path):
        assert np.array_equal(rts[1].matmul(x, view), full)
        for n in (1, 2, 3, 5, 16, 17):
            assert np.array_equal(rts[2].matmul(np.ascontiguousarray(x[10:10 + n]), view), full[10:10 + n])
        for r in (0, 36):
            assert np.array_equal(rts[1].matmul(np.ascontiguousarray(x[r:r + 1]), view)[0], full[r])


def test_matmul_many_and_heads_equal_single_products(rts):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((9, 40)).astype(np.float32)
    views = [quantized(rng, rows, 40, s)[0] for rows, s in ((24, "f32"), (8, "int8"), (8, "bf16"))]
    biases = [None, rng.standard_normal(8).astype(np.float32), None]
    outs = rts[2].matmul_many(x, views, biases)
    for o, v, b in zip(outs, views, biases):
        assert o.flags.c_contiguous and np.array_equal(o, rts[1].matmul(x, v, b))
    same = rts[2].matmul_many(x, views[1:])                 # equal row counts: the no-copy layout
    assert all(np.array_equal(o, rts[1].matmul(x, v)) for o, v in zip(same, views[1:]))
    heads = [quantized(rng, 12, 16, "f16")[0] for _ in range(3)]
    xh = rng.standard_normal((5, 3, 24)).astype(np.float32)
    out = rts[2].matmul_heads(xh, heads, 3, 16, offset=8)
    assert out.shape == (5, 3, 12)
    for h in range(3):
        assert np.array_equal(out[:, h], rts[1].matmul(np.ascontiguousarray(xh[:, h, 8:24]), heads[h]))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_quantized_matrix_equals_the_packed_expert_matrix(rts, scheme):
    rng = np.random.default_rng(9)
    w = (rng.standard_normal((33, 70)) * 0.3).astype(np.float32)
    blob, layout = pack_expert(w, w, w.T.copy(), scheme)
    x = rng.standard_normal((4, 70)).astype(np.float32)
    q = quantized_matrix(w, scheme)
    assert (q.rows, q.cols, q.dtype) == (33, 70, layout.gate.dtype)
    assert np.array_equal(rts[1].matmul(x, q), rts[1].matmul(x, matrix_view(blob, layout.gate)))
    if scheme in EMBED_SCHEMES:
        assert np.array_equal(embed(q, [32, 0]), dequantize(blob, layout.gate)[[32, 0]])


def test_matrix_views_check_their_arguments(rts):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = matrix_from_array(w.T)                               # non-contiguous input is copied
    assert (v.rows, v.cols) == (4, 3) and np.array_equal(rts[1].matmul(np.eye(3, dtype=np.float32), v), w)
    with pytest.raises(InvalidArgument, match="does not fit"):
        matrix_view(np.zeros(40, np.uint8), MatrixLayout(0, 3, 4, 0, 48))
    with pytest.raises(InvalidArgument, match="float32"):
        matrix_from_array(w.astype(np.float64))
    with pytest.raises(InvalidArgument, match="unknown weight scheme"):
        quantized_matrix(w, "int4")
    with pytest.raises(InvalidArgument, match="columns"):
        rts[1].matmul(np.zeros((2, 5), np.float32), v)
    with pytest.raises(InvalidArgument, match="x must be float32"):
        rts[1].matmul(np.zeros((2, 3), np.float64), v)
    with pytest.raises(InvalidArgument, match="biases\\[0\\]"):
        rts[1].matmul(np.zeros((2, 3), np.float32), v, np.zeros(3, np.float32))
    with pytest.raises(InvalidArgument, match="2 matrices for 3 heads"):
        rts[1].matmul_heads(np.zeros((1, 3, 3), np.float32), [v, v], 3, 3)


def test_rmsnorm_vs_reference():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((6, 50)) * 4).astype(np.float32)
    w = rng.standard_normal(50).astype(np.float32)
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(rmsnorm(x, w, 1e-6), ref * w, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(rmsnorm(x, None, 1e-6), ref, rtol=2e-6, atol=1e-6)
    assert np.array_equal(rmsnorm(np.ascontiguousarray(x[2:3]), w, 1e-6)[0], rmsnorm(x, w, 1e-6)[2])
    with pytest.raises(InvalidArgument, match="weight has shape"):
        rmsnorm(x, w[:10], 1e-6)
    with pytest.raises(NativeError, match="eps"):
        rmsnorm(x, w, float("nan"))


def ggml_rmsnorm(x, w, eps):
    """ggml_compute_forward_rms_norm_f32 then ggml_mul, per row: float squares summed in double in ascending order,
    the mean rounded to float, scale = 1.0f / sqrtf(mean + eps) in float, (x * scale) * w."""
    sums = np.cumsum((x * x).astype(np.float64), axis=1)[:, -1]          # sequential, as ggml's loop (np.sum pairs)
    mean = (sums / x.shape[1]).astype(np.float32)
    scale = np.float32(1.0) / np.sqrt(mean + np.float32(eps))
    return (x * scale[:, None]) * w


def test_rmsnorm_scale_is_ggmls_float_formula_bit_for_bit():
    """The scale as llama.cpp computes it (torch's float mean and rsqrt likewise), not in double: an ulp of
    difference turns the int8 quantization's rounding ties of the next product the other way (rows decoded from
    IQ4_XS blocks have many). Random rows and rows of a few integers times one scale, as such decoded rows are."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((400, 256)) * 3).astype(np.float32)
    tied = (rng.integers(-127, 128, (400, 256)) * np.float32(0.0123)).astype(np.float32)
    w = rng.standard_normal(256).astype(np.float32)
    for rows in (x, tied):
        for eps in (1e-6, 1e-5):
            assert np.array_equal(rmsnorm(rows, w, eps), ggml_rmsnorm(rows, w, eps))
            assert np.array_equal(rmsnorm(rows, None, eps), ggml_rmsnorm(rows, np.float32(1.0), eps))


def test_rmsnorm_into_a_given_buffer_gives_the_same_bits_and_refuses_bad_ones():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((5, 40)) * 3).astype(np.float32)
    w = rng.standard_normal(40).astype(np.float32)
    out = np.full_like(x, np.nan)
    assert rmsnorm(x, w, 1e-6, out=out) is out and np.array_equal(out, rmsnorm(x, w, 1e-6))
    with pytest.raises(InvalidArgument, match="out must not overlap x"):
        rmsnorm(x, w, 1e-6, out=x)
    with pytest.raises(InvalidArgument, match="out has shape"):
        rmsnorm(x, w, 1e-6, out=np.empty((5, 41), np.float32))
    with pytest.raises(InvalidArgument, match="out must be float32"):
        rmsnorm(x, w, 1e-6, out=np.empty((5, 40), np.float64))
    frozen = np.empty_like(x)
    frozen.flags.writeable = False
    with pytest.raises(InvalidArgument, match="out must be writable"):
        rmsnorm(x, w, 1e-6, out=frozen)


@pytest.mark.parametrize("scheme", EMBED_SCHEMES)
def test_embed_rows_are_exactly_the_decoded_rows(scheme):
    rng = np.random.default_rng(5)
    view, ref = quantized(rng, 30, 70, scheme)
    ids = np.array([3, 0, 29, 3], np.int64)
    assert np.array_equal(embed(view, ids), ref[ids].astype(np.float32))


def test_embed_rejects_bad_ids():
    v = matrix_from_array(np.zeros((5, 4), np.float32))
    with pytest.raises(InvalidArgument, match=r"ids\[1\] = 5 outside \[0, 4\]"):
        embed(v, np.array([0, 5]))
    with pytest.raises(InvalidArgument, match=r"ids\[0\] = -1"):
        embed(v, [-1])
    with pytest.raises(InvalidArgument, match="integer"):
        embed(v, np.array([0.5]))


def _hf_rope(x, positions, inv_freq, factor, interleaved):
    """transformers' apply_rotary_pos_emb / apply_rotary_pos_emb_interleave on x [n, heads, dim]."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import apply_rotary_pos_emb_interleave
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    freqs = torch.tensor(positions, dtype=torch.float32)[:, None] * torch.from_numpy(inv_freq)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = (emb.cos() * factor)[None], (emb.sin() * factor)[None]
    q = torch.from_numpy(x).permute(1, 0, 2)[None]           # [1, heads, seq, dim]
    fn = apply_rotary_pos_emb_interleave if interleaved else apply_rotary_pos_emb
    return fn(q, q, cos, sin)[0][0].permute(1, 0, 2).numpy()


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_matches_transformers(interleaved):
    rng = np.random.default_rng(6)
    dim = 32
    inv_freq = (1.0 / 10000 ** (np.arange(0, dim, 2) / dim)).astype(np.float32)
    x = rng.standard_normal((7, 3, dim)).astype(np.float32)
    positions = np.array([0, 1, 2, 5, 100, 4095, 31000])
    y = rope_apply(x.copy(), positions, dim, inv_freq, attention_factor=1.25, interleaved=interleaved)
    np.testing.assert_allclose(y, _hf_rope(x, positions, inv_freq, 1.25, interleaved), rtol=1e-5, atol=2e-5)
    one = rope_apply(np.ascontiguousarray(x[4:5]), positions[4:5], dim, inv_freq, 1.25, interleaved)
    assert np.array_equal(one[0], y[4])                     # a token's bits depend on its position only


def test_rope_partial_dims_keep_the_rest():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 2, 24)).astype(np.float32)
    inv_freq = (1.0 / 500 ** (np.arange(0, 8, 2) / 8)).astype(np.float32)
    pos = np.arange(4) * 3
    y = rope_apply(x.copy(), pos, 8, inv_freq, offset=16, interleaved=True)
    assert np.array_equal(y[..., :16], x[..., :16])
    np.testing.assert_allclose(y[..., 16:], _hf_rope(np.ascontiguousarray(x[..., 16:]), pos, inv_freq, 1.0, True),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(InvalidArgument, match="inv_freq has shape"):
        rope_apply(x, pos, 8, inv_freq[:3])
    with pytest.raises(NativeError, match="offset 20 \\+ rot_dim 8"):
        rope_apply(x, pos, 8, inv_freq, offset=20)
    with pytest.raises(InvalidArgument, match="positions has 3 entries"):
        rope_apply(x, pos[:3], 8, inv_freq)


def test_log_softmax_vs_torch():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((5, 300)) * 6).astype(np.float32)
    ref = torch.log_softmax(torch.from_numpy(x).double(), dim=-1).numpy()
    np.testing.assert_allclose(log_softmax(x), ref, rtol=1e-5, atol=1e-5)
    x[1, 7] = -np.inf                                          # masked logits are fine
    assert log_softmax(x)[1, 7] == -np.inf
    x[2, 3] = np.nan
    with pytest.raises(NativeError, match=r"x\[2, 3\]"):
        log_softmax(x)
