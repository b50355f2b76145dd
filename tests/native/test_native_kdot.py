"""k-quant weights x llama.cpp's Q8_K activations (kernels_kq*.c): the integer path q4_k / q5_k / q6_k take with the
w8a8 switch on (the default of MoeExecutor / LLM).

The scalar kernel equals a numpy model of ggml's formula (kq_ref.py: the blocks read into codes / scales / mins
whose dequantization equals gguf.quants.dequantize, activations quantized as quantize_row_q8_K_ref, integer sums,
the documented float order) bit for bit; the product sits within the Q8_K rounding bound of gguf's dequantized
weights times x; every SIMD level, token count, row subset and thread count gives the scalar bits for dense
matrices and experts (q4_k gate/up with a q6_k down as in Q4_K_M included); the switch off keeps the f32 decoders.
"""
import dataclasses

import numpy as np
import pytest

from colibri_dist.format.kquants import QUANTIZE
from colibri_dist.format.layout import ExpertLayout
from colibri_dist.format.quantize import Encoded, pack_expert
from colibri_dist.native import expert_view, matrix_view, simd_force
from kq_ref import kq_matmul, kq_parts, parts_dequantize, quantization_bound
from native_helpers import assert_dense_equals, assert_experts_equal, assert_scalar_equals, simd_params, w8a8_runtimes
from test_native_kquants import KQ, QTYPE, gguf, packed, random_blocks

TOKENS = (1, 2, 3, 4, 5, 8, 9, 17, 32, 33)


@pytest.fixture(scope="module")
def rts():
    yield from w8a8_runtimes()


def activations(rng, n, cols):
    """Random rows with the quantizer's edge cases: a zero block, a tiny row, a tie of +a / -a for the largest |x|
    (the first one sets the sign of d), a block whose largest |x| is negative, exact .5 products."""
    x = rng.standard_normal((n, cols)).astype(np.float32)
    x[min(1, n - 1), :256] = 0.0
    if n > 2:
        x[2] *= np.float32(1e-30)
    if n > 3:
        x[3, 10], x[3, 20] = -7.0, 7.0
        x[3, 300 % cols] = -9.0
    if n > 4:
        x[4, :256] = np.float32(127.0) / np.arange(1, 257, dtype=np.float32)
    return x


@pytest.mark.parametrize("scheme", KQ)
def test_reference_parts_are_gguf_values(scheme):
    """The numpy model reads the blocks as gguf does: its parts dequantize to gguf.quants.dequantize bit for bit."""
    raw = random_blocks(np.random.default_rng(2), scheme, 9, 768)
    want = gguf.quants.dequantize(raw, QTYPE[scheme]).astype(np.float32)
    got = parts_dequantize(kq_parts(raw, scheme), scheme).reshape(want.shape)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("scheme", KQ)
@pytest.mark.parametrize("rows,cols", [(67, 512), (5, 256), (1, 768), (33, 1024)])
def test_scalar_kernel_equals_the_numpy_model_of_ggml_formula(rts, scheme, rows, cols):
    rng = np.random.default_rng(rows + cols)
    raw = random_blocks(rng, scheme, rows, cols)
    view = matrix_view(*packed(raw, scheme, rows, cols))
    x = activations(rng, 33, cols)
    ref = kq_matmul(x, raw, scheme, rows, cols)
    assert_scalar_equals(rts, x, view, ref)
    if cols == 256:
        assert not ref[1].any()                     # an all-zero input block: d = 0, codes 0, no NaN


@pytest.mark.parametrize("scheme", KQ)
def test_product_is_within_the_activation_rounding_of_gguf_weights_times_x(rts, scheme):
    """|ours - gguf.dequantize(W) @ x| <= sum_b |da_b| / 2 * sum_{k in b} |W| (+ float slack): Q8_K's rounding."""
    rng = np.random.default_rng(4)
    raw = quantized_blocks(rng, scheme, 40, 1024)
    deq = gguf.quants.dequantize(raw, QTYPE[scheme]).astype(np.float64)
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    got = rts[2].matmul(x, matrix_view(*packed(raw, scheme, 40, 1024))).astype(np.float64)
    exact = x.astype(np.float64) @ deq.T
    bound = quantization_bound(x, deq) + 1e-5 * np.abs(exact).max()
    assert (np.abs(got - exact) <= bound).all()
    assert np.abs(got - exact).max() > 0                   # the activations really are quantized
    assert np.abs(got - exact).max() <= 0.02 * np.abs(exact).max()


@pytest.mark.parametrize("level", simd_params())
@pytest.mark.parametrize("scheme", KQ)
@pytest.mark.parametrize("rows", [67, 8, 3, 1])
def test_dense_every_level_tokens_rows_and_threads_equal_scalar(rts, level, scheme, rows):
    rng = np.random.default_rng(11 * rows)
    raw = random_blocks(rng, scheme, rows, 512)
    view = matrix_view(*packed(raw, scheme, rows, 512))
    x = activations(rng, max(TOKENS), 512)
    ref = kq_matmul(x, raw, scheme, rows, 512)
    assert_dense_equals(rts, level, x, view, ref, TOKENS)


def test_matmul_many_shares_one_q8k_input_across_k_quants(rts):
    """q/k/v style: a q4_k, a q6_k and a q5_k matrix on one input give each its own product."""
    rng = np.random.default_rng(3)
    x = activations(rng, 6, 512)
    raws = [(s, random_blocks(rng, s, r, 512)) for s, r in (("q4_k", 40), ("q6_k", 9), ("q5_k", 17))]
    views = [matrix_view(*packed(raw, s, raw.shape[0], 512)) for s, raw in raws]
    outs = rts[2].matmul_many(x, views)
    for (s, raw), out in zip(raws, outs):
        assert np.array_equal(out, kq_matmul(x, raw, s, raw.shape[0], 512)), s


def random_expert(rng, scheme, hidden, inter, down=None, blocks=random_blocks):
    """An expert of `blocks(rng, scheme, rows, cols)` (random blocks by default); down in another k-quant when `down`
    is given (Q4_K_M's q4_k gate / up with a q6_k down)."""
    def enc(s, rows, cols):
        return Encoded(s, rows, cols, blocks(rng, s, rows, cols))
    blob, lay = pack_expert(enc(scheme, inter, hidden), enc(scheme, inter, hidden), enc(scheme, hidden, inter), scheme)
    if down is None:
        return expert_view(blob, lay)
    other, olay = pack_expert(enc(down, inter, hidden), enc(down, inter, hidden), enc(down, hidden, inter), down)
    dl = dataclasses.replace(olay.down, data_offset=olay.down.data_offset + blob.size)
    both = ExpertLayout(lay.gate, lay.up, dl, blob.size + other.size, scheme)
    return expert_view(np.concatenate([blob, other]), both)


def quantized_blocks(rng, scheme, rows, cols):
    """Blocks of our quantizer on N(0, 0.05) weights: realistic magnitudes."""
    return QUANTIZE[scheme]((rng.standard_normal((rows, cols)) * 0.05).astype(np.float32))


@pytest.mark.parametrize("scheme,down", [("q4_k", None), ("q5_k", None), ("q6_k", None), ("q4_k", "q6_k")])
def test_expert_every_level_batch_rows_and_threads_equal_scalar(rts, scheme, down):
    rng = np.random.default_rng(17)
    view = random_expert(rng, scheme, 512, 256, down)
    x = activations(rng, 33, 512) * np.float32(0.05)
    assert_experts_equal(rts, x, view)


def test_expert_is_the_numpy_model_through_both_matrices(rts):
    """gate / up through Q8_K, then down through the Q8_K blocks of h: close to kq_matmul phase by phase (silu.c's
    exp is its own, so h and hence the down product are compared within a tolerance)."""
    rng = np.random.default_rng(23)
    view = random_expert(rng, "q4_k", 256, 256, "q6_k", blocks=quantized_blocks)
    lay, buf = view.layout, view.buffer
    raw = {n: buf[m.data_offset:m.data_offset + m.data_bytes].reshape(m.rows, -1)
           for n in ("gate", "up", "down") for m in [getattr(lay, n)]}
    x = activations(rng, 5, 256)
    g, u = kq_matmul(x, raw["gate"], "q4_k", 256, 256), kq_matmul(x, raw["up"], "q4_k", 256, 256)
    h = (g / (1 + np.exp(-g.astype(np.float64))) * u).astype(np.float32)
    want = kq_matmul(h, raw["down"], "q6_k", 256, 256)
    with simd_force("scalar"):
        got = rts[1].expert_forward(x, view)
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()
