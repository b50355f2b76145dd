"""llama.cpp's remaining vec_dot pairs with the w8a8 switch on (the default of MoeExecutor / LLM): mxfp4 and iq4_nl x
Q8_0, q5_1 x Q8_1 (kernels_q80*.c) and iq4_xs x Q8_K (kernels_kq*.c), as ggml-cpu's type_traits pair them
(ggml_vec_dot_mxfp4_q8_0, _iq4_nl_q8_0, _q5_1_q8_1, _iq4_xs_q8_K).

The numpy models (q80_ref.py, kq_ref.py) read the blocks into parts that dequantize to gguf.quants.dequantize bit for
bit; the scalar kernel equals the model of ggml's formula bit for bit; the product sits within the activation
rounding bound of gguf's dequantized weights times x; every SIMD level, token count, row subset and thread count
gives the model's bits for dense matrices and experts; the switch off keeps the f32 decoders. Where llama.cpp is
built, every block pair (the older ones too) sits within float reordering of ggml-cpu's own vec_dot (ggml_ref.py).
"""
import numpy as np
import pytest

from colibri_dist.format.quantize import pack_matrix
from colibri_dist.native import matrix_view
from kq_ref import kq_matmul, kq_parts
from kq_ref import parts_dequantize as kq_dequantize
from kq_ref import quantization_bound as q8k_bound
from native_helpers import assert_dense_equals, assert_experts_equal, assert_scalar_equals, simd_params, w8a8_runtimes
from q80_ref import parts_dequantize, q80_matmul, q80_parts, quantize_q81
from q80_ref import quantization_bound as q80_bound
from test_native_kdot import activations as activations_256, random_expert
from test_native_lut_blocks import QTYPE, gguf, packed, random_blocks
from test_native_q80dot import activations as activations_32

Q80 = ("mxfp4", "iq4_nl", "q5_1")
SCHEMES = Q80 + ("iq4_xs",)
TOKENS = (1, 2, 3, 4, 5, 8, 9, 17, 32, 33)


@pytest.fixture(scope="module")
def rts():
    yield from w8a8_runtimes()


def model(x, raw, scheme, rows, cols):
    return kq_matmul(x, raw, scheme, rows, cols) if scheme == "iq4_xs" else q80_matmul(x, raw, rows, cols, scheme)


def activations(rng, scheme, n, cols):
    return activations_256(rng, n, cols) if scheme == "iq4_xs" else activations_32(rng, n, cols)


def view_of(raw, scheme, rows, cols):
    return matrix_view(*packed(raw, scheme, rows, cols))


def ours(rng, scheme, rows, cols):
    """Blocks of our quantizer on N(0, 0.05) weights: realistic magnitudes."""
    blob, lay = pack_matrix((rng.standard_normal((rows, cols)) * 0.05).astype(np.float32), scheme)
    return blob[:lay.data_bytes].reshape(rows, -1)


def blocks(rng, scheme, rows, cols):
    """Random blocks (every code, mxfp4's E8M0 bytes in a range that keeps products finite)."""
    return random_blocks(rng, scheme, rows, cols, scales=np.arange(100, 140))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_reference_parts_are_gguf_values(scheme):
    rng = np.random.default_rng(2)
    raw = random_blocks(rng, scheme, 9, 512, scales=np.arange(256))
    with np.errstate(over="ignore"):                # mxfp4's largest E8M0 bytes: inf in both
        want = gguf.quants.dequantize(raw, QTYPE[scheme]).astype(np.float32)
        if scheme == "iq4_xs":
            got = kq_dequantize(kq_parts(raw, scheme), scheme).reshape(want.shape)
        else:
            got = parts_dequantize(*q80_parts(raw, 9, 16, scheme))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_q8_1_s_is_the_block_sum_times_d_rounded_to_f16():
    """quantize_row_q8_1's s against the block's own codes: f16 of amax / 127 * sum q (a zero block: 0)."""
    x = activations_32(np.random.default_rng(5), 6, 96)
    q, d, s = quantize_q81(x)
    amax = np.abs(x.reshape(6, 3, 32)).max(axis=2).astype(np.float64)
    want = amax / 127 * q.sum(axis=2)
    assert s[1, 0] == 0 and np.abs(q).max() == 127
    assert (np.abs(s - want) <= np.abs(want) * 2.0 ** -11 + 2.0 ** -24).all()
    assert np.array_equal(d, (amax / 127).astype(np.float32).astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("scheme,rows,cols", [(s, r, c) for s in SCHEMES for r, c in [(67, 512), (5, 256), (1, 768)]])
def test_scalar_kernel_equals_the_numpy_model_of_ggml_formula(rts, scheme, rows, cols):
    rng = np.random.default_rng(rows + cols)
    raw = blocks(rng, scheme, rows, cols)
    view = view_of(raw, scheme, rows, cols)
    x = activations(rng, scheme, 33, cols)
    ref = model(x, raw, scheme, rows, cols)
    assert_scalar_equals(rts, x, view, ref)
    if scheme == "iq4_xs" and cols == 256:
        assert not ref[1].any()                     # an all-zero input block: d = 0, codes 0, no NaN


@pytest.mark.parametrize("scheme", SCHEMES)
def test_product_is_within_the_activation_rounding_of_gguf_weights_times_x(rts, scheme):
    """|ours - gguf.dequantize(W) @ x| <= the activation type's rounding bound (+ float slack); the switch off: the
    f32 decoders, close to exact and not the same bits."""
    rng = np.random.default_rng(4)
    raw = ours(rng, scheme, 40, 1024)
    deq = gguf.quants.dequantize(raw, QTYPE[scheme]).astype(np.float64)
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    got = rts[2].matmul(x, view_of(raw, scheme, 40, 1024)).astype(np.float64)
    exact = x.astype(np.float64) @ deq.T
    bound = (q8k_bound if scheme == "iq4_xs" else q80_bound)(x, deq) + 1e-5 * np.abs(exact).max()
    if scheme == "q5_1":                           # plus m * (the f16 rounding of s) per block
        m = q80_parts(raw, 40, 32, scheme)[2].astype(np.float64)
        _, _, s = quantize_q81(x)
        bound += (np.abs(s).astype(np.float64) * 2.0 ** -11 + 2.0 ** -24) @ np.abs(m).T
    assert (np.abs(got - exact) <= bound).all()
    assert np.abs(got - exact).max() > 0                   # the activations really are quantized
    assert np.abs(got - exact).max() <= 0.02 * np.abs(exact).max()
    plain = rts["plain"].matmul(x, view_of(raw, scheme, 40, 1024)).astype(np.float64)
    assert np.abs(plain - exact).max() <= 1e-5 * np.abs(exact).max() and not np.array_equal(plain, got)


@pytest.mark.parametrize("level", simd_params())
@pytest.mark.parametrize("scheme,rows,cols", [(s, r, c) for s in SCHEMES for r, c in [(67, 512), (3, 256)]] +
                         [("mxfp4", 8, 2880), ("iq4_nl", 1, 64), ("q5_1", 9, 96)])
def test_dense_every_level_tokens_rows_and_threads_equal_the_model(rts, level, scheme, rows, cols):
    rng = np.random.default_rng(11 * rows + cols)
    raw = blocks(rng, scheme, rows, cols)
    view = view_of(raw, scheme, rows, cols)
    x = activations(rng, scheme, max(TOKENS), cols)
    ref = model(x, raw, scheme, rows, cols)
    assert_dense_equals(rts, level, x, view, ref, TOKENS)


def test_matmul_many_gives_each_pair_its_activations(rts):
    """One input through q8_0, mxfp4 (both Q8_0 blocks), q5_1 (Q8_1) and iq4_xs (Q8_K) matrices: each its product."""
    from test_native_q80dot import random_blocks as q80_blocks, view_of as q80_view
    rng = np.random.default_rng(3)
    x = activations_32(rng, 6, 512)
    a, b, c, d = q80_blocks(rng, 40, 512), blocks(rng, "mxfp4", 9, 512), blocks(rng, "q5_1", 17, 512), \
        blocks(rng, "iq4_xs", 5, 512)
    outs = rts[2].matmul_many(x, [q80_view(a, 40, 512), view_of(b, "mxfp4", 9, 512), view_of(c, "q5_1", 17, 512),
                                  view_of(d, "iq4_xs", 5, 512)])
    assert np.array_equal(outs[0], q80_matmul(x, a, 40, 512))
    assert np.array_equal(outs[1], q80_matmul(x, b, 9, 512, "mxfp4"))
    assert np.array_equal(outs[2], q80_matmul(x, c, 17, 512, "q5_1"))
    assert np.array_equal(outs[3], kq_matmul(x, d, "iq4_xs", 5, 512))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_expert_every_level_batch_rows_and_threads_equal_scalar(rts, scheme):
    rng = np.random.default_rng(17)
    view = random_expert(rng, scheme, 512, 256, blocks=ours)
    x = activations(rng, scheme, 33, 512) * np.float32(0.05)
    assert_experts_equal(rts, x, view, slack=0.05)


@pytest.mark.parametrize("scheme", SCHEMES + ("q8_0", "q5_0", "q4_k", "q5_k", "q6_k"))
def test_products_are_ggml_cpus_own_vec_dot(rts, scheme):
    """Against llama.cpp's own code (ggml_ref.py: its type_traits' from_float and vec_dot through ctypes on the
    llama.cpp build): the same integers, ggml's float order (its 8 lanes) against ours, so within the reordering
    bound of the block terms: (blocks + 16) * 2^-24 * sum |w| |x|; q8_0, q5_1, iq4_xs and q6_k, in ggml's own
    order, equal to the bit (skipped when llama.cpp is not built)."""
    from ggml_ref import ggml_products, load
    libs = load()
    if libs is None:
        pytest.skip("llama.cpp's libggml-cpu.so is not built")
    rng = np.random.default_rng(31)
    raw = ours(rng, scheme, 48, 1024)
    x = rng.standard_normal((5, 1024)).astype(np.float32)
    want = ggml_products(libs, QTYPE.get(scheme, gguf.GGMLQuantizationType[scheme.upper()]), raw, x)
    got = rts[2].matmul(x, view_of(raw, scheme, 48, 1024))
    deq = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[scheme.upper()]).astype(np.float64)
    bound = (1024 // 32 + 16) * 2.0 ** -24 * (np.abs(x).astype(np.float64) @ np.abs(deq).T)
    assert (np.abs(got.astype(np.float64) - want) <= bound).all()
    if scheme in ("q8_0", "q5_1", "iq4_xs", "q6_k"):   # these take ggml's own vec_dot order: its bits exactly
        assert np.array_equal(got, want)
