"""q8_0 and q5_0 weights x llama.cpp's Q8_0 activations (kernels_q80*.c): the integer path q8_0 and q5_0 matrices
take with the w8a8 switch on (the default of MoeExecutor / LLM), as ggml runs Q8_0 and Q5_0 (their vec_dot_type
is Q8_0).

The scalar kernel equals a numpy model of ggml's formula (q80_ref.py: the blocks read as gguf.quants reads them,
activations quantized as ggml-cpu's x86 quantize_row_q8_0, integer sums per block, the documented float order) bit
for bit, short last blocks (colibri's own q8_0 rows) included; the product sits within the Q8_0 rounding bound of
gguf's dequantized weights times x; every SIMD level, token count, row subset and thread count gives the scalar bits
for dense matrices and experts; the switch off keeps the f32 decoders.
"""
import numpy as np
import pytest

from colibri_dist.format.quantize import Encoded, pack_matrix
from colibri_dist.native import matrix_view, simd_force
from native_helpers import assert_dense_equals, assert_experts_equal, assert_scalar_equals, simd_params, w8a8_runtimes
from q80_ref import q80_matmul, q80_parts, quantization_bound, quantize_q80
from test_native_kdot import random_expert

gguf = pytest.importorskip("gguf")
SCHEMES = ("q8_0", "q5_0")
TOKENS = (1, 2, 3, 4, 5, 8, 9, 17, 32, 33)


@pytest.fixture(scope="module")
def rts():
    yield from w8a8_runtimes()


def random_blocks(rng, rows, cols, scheme="q8_0"):
    """uint8 [rows, ceil(cols / 32) * 34 (q5_0: 22)]: random codes (q8_0's -128 included), f16 d of either sign over
    several magnitudes."""
    n = rows * -(-cols // 32)
    b = rng.integers(0, 256, (n, 34 if scheme == "q8_0" else 22), dtype=np.uint8)
    h = (rng.standard_normal(n) * rng.choice([1e-6, 1e-3, 1.0, 300.0], n)).astype(np.float16)
    b[:, :2] = h.view(np.uint8).reshape(n, 2)
    return b.reshape(rows, -1)


def view_of(raw, rows, cols, scheme="q8_0"):
    return matrix_view(*pack_matrix(Encoded(scheme, rows, cols, raw), scheme))


def activations(rng, n, cols):
    """Random rows with the quantizer's edge cases: a zero block, a tiny row (d a subnormal half or 0), a block whose
    largest |x| is negative, exact .5 products."""
    x = rng.standard_normal((n, cols)).astype(np.float32)
    x[min(1, n - 1), :32] = 0.0
    if n > 2:
        x[2] *= np.float32(1e-6)
    if n > 3:
        x[3, 5] = -9.0
    if n > 4:
        x[4, :32] = np.float32(127.0) / np.arange(1, 33, dtype=np.float32)
    return x


@pytest.mark.parametrize("scheme", SCHEMES)
def test_reference_reads_blocks_as_gguf_and_quantizes_as_ggml(scheme):
    rng = np.random.default_rng(2)
    raw = random_blocks(rng, 9, 256, scheme)
    codes, d, _ = q80_parts(raw, 9, 8, scheme)
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[scheme.upper()]).astype(np.float32)
    got = (codes.astype(np.float32) * d[..., None]).reshape(9, 256)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    x = activations(rng, 6, 64)
    q, da = quantize_q80(x)
    assert np.abs(q).max() == 127 and not q[1, 0].any() and da[1, 0] == 0
    normal = [0, 3, 4, 5]                           # row 2 is tiny: d rounds to a subnormal half or 0, as in ggml
    err = np.abs(q.reshape(6, 64) * np.repeat(da, 32, axis=1) - x)[normal]
    assert np.all(err <= np.repeat(da, 32, axis=1)[normal] * (0.5 + 127 * 2.0 ** -10))
    assert da[2].max() < 1e-7 and np.abs(q[2]).max() == 127


@pytest.mark.parametrize("scheme,rows,cols", [(s, r, c) for s in SCHEMES
                                              for r, c in [(67, 512), (5, 32), (1, 96), (33, 1024), (7, 40), (3, 70)]
                                              if s == "q8_0" or c % 32 == 0])
def test_scalar_kernel_equals_the_numpy_model_of_ggml_formula(rts, scheme, rows, cols):
    rng = np.random.default_rng(rows + cols)
    raw = random_blocks(rng, rows, cols, scheme)
    view = view_of(raw, rows, cols, scheme)
    x = activations(rng, 33, cols)
    ref = q80_matmul(x, raw, rows, cols, scheme)
    assert_scalar_equals(rts, x, view, ref)
    if cols == 32:
        assert not ref[1].any()                     # an all-zero input block: d = 0, codes 0, no NaN


@pytest.mark.parametrize("scheme", SCHEMES)
def test_product_is_within_the_activation_rounding_of_gguf_weights_times_x(rts, scheme):
    """|ours - gguf.dequantize(W) @ x| <= sum_b |da_b| (1/2 + d's f16 rounding) sum_{k in b} |W| (+ float slack)."""
    rng = np.random.default_rng(4)
    raw = q8_blocks(rng, scheme, 40, 1024)
    deq = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[scheme.upper()]).astype(np.float64)
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    got = rts[2].matmul(x, view_of(raw, 40, 1024, scheme)).astype(np.float64)
    exact = x.astype(np.float64) @ deq.T
    bound = quantization_bound(x, deq) + 1e-5 * np.abs(exact).max()
    assert (np.abs(got - exact) <= bound).all()
    assert np.abs(got - exact).max() > 0                   # the activations really are quantized
    assert np.abs(got - exact).max() <= 0.02 * np.abs(exact).max()
    plain = rts["plain"].matmul(x, view_of(raw, 40, 1024, scheme)).astype(np.float64)   # switch off: the f32 decoders
    assert np.abs(plain - exact).max() <= 1e-5 * np.abs(exact).max() and not np.array_equal(plain, got)


@pytest.mark.parametrize("level", simd_params())
@pytest.mark.parametrize("scheme,rows,cols", [("q8_0", 67, 512), ("q8_0", 8, 512), ("q8_0", 3, 96), ("q8_0", 1, 512),
                                              ("q8_0", 9, 70), ("q5_0", 67, 512), ("q5_0", 3, 96), ("q5_0", 1, 64)])
def test_dense_every_level_tokens_rows_and_threads_equal_scalar(rts, level, scheme, rows, cols):
    rng = np.random.default_rng(11 * rows + cols)
    raw = random_blocks(rng, rows, cols, scheme)
    view = view_of(raw, rows, cols, scheme)
    x = activations(rng, max(TOKENS), cols)
    ref = q80_matmul(x, raw, rows, cols, scheme)
    assert_dense_equals(rts, level, x, view, ref, TOKENS)


def test_matmul_many_gives_q8_0_and_k_quants_each_their_activations(rts):
    """q/k/v style on one input: a q8_0 matrix (Q8_0 blocks) beside a q4_k one (Q8_K blocks): each its own product."""
    from kq_ref import kq_matmul
    from test_native_kquants import random_blocks as kq_blocks, packed
    rng = np.random.default_rng(3)
    x = activations(rng, 6, 512)
    a, b, c = random_blocks(rng, 40, 512), kq_blocks(rng, "q4_k", 9, 512), random_blocks(rng, 17, 512)
    outs = rts[2].matmul_many(x, [view_of(a, 40, 512), matrix_view(*packed(b, "q4_k", 9, 512)), view_of(c, 17, 512)])
    assert np.array_equal(outs[0], q80_matmul(x, a, 40, 512))
    assert np.array_equal(outs[1], kq_matmul(x, b, "q4_k", 9, 512))
    assert np.array_equal(outs[2], q80_matmul(x, c, 17, 512))


def q8_blocks(rng, scheme, rows, cols):
    """Blocks of our quantizers (q8_0, q5_0) on N(0, 0.05) weights."""
    from colibri_dist.format.quantize import quantize_matrix
    return quantize_matrix((rng.standard_normal((rows, cols)) * 0.05).astype(np.float32), scheme)[0].reshape(rows, -1)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_expert_every_level_batch_rows_and_threads_equal_scalar(rts, scheme):
    rng = np.random.default_rng(17)
    view = random_expert(rng, scheme, 512, 224, blocks=q8_blocks)
    x = activations(rng, 33, 512) * np.float32(0.05)
    assert_experts_equal(rts, x, view, slack=0.05)


def test_expert_is_the_numpy_model_through_both_matrices(rts):
    """gate / up through Q8_0 activations, then down through the Q8_0 blocks of h: close to q80_matmul phase by
    phase (silu.c's exp is its own, so h and hence the down product are compared within a tolerance)."""
    rng = np.random.default_rng(23)
    view = random_expert(rng, "q8_0", 256, 96, blocks=q8_blocks)
    lay, buf = view.layout, view.buffer
    raw = {n: buf[m.data_offset:m.data_offset + m.data_bytes].reshape(m.rows, -1)
           for n in ("gate", "up", "down") for m in [getattr(lay, n)]}
    x = activations(rng, 5, 256)
    g, u = q80_matmul(x, raw["gate"], 96, 256), q80_matmul(x, raw["up"], 96, 256)
    h = (g / (1 + np.exp(-g.astype(np.float64))) * u).astype(np.float32)
    want = q80_matmul(h, raw["down"], 256, 96)
    with simd_force("scalar"):
        got = rts[1].expert_forward(x, view)
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()
