"""MLA's absorbed per-head products on encoded matrices: split_rows views each head's rows of one stacked matrix
(an imported GGUF's attn_k_b / attn_v_b: k_b_proj [heads * kv_lora, nope], v_b_proj [heads * v, kv_lora]) in its
own encoding, and Runtime.matmul_heads multiplies each head's slice of the input by its rows.

With the w8a8 switch on, a q8_0 / q5_0 head takes llama.cpp's Q8_0 activations and a k-quant head its Q8_K ones,
quantized per (token, head) row as ggml quantizes the rows of q_nope and of the latent attention output: the
product equals the numpy model of ggml's arithmetic (q80_ref.py, kq_ref.py) bit for bit on every SIMD level,
token count and thread count. Views of colibri's own encodings (per-row and per-group scales) give the rows of the
whole matrix's product; a split that does not divide the rows is refused.
"""
import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.format.quantize import quantize_matrix
from colibri_dist.native import matrix_from_array, matrix_view, quantized_matrix, simd_force, split_rows
from kq_ref import kq_matmul
from native_helpers import simd_params, w8a8_runtimes
from q80_ref import q80_matmul
from test_native_kquants import packed, random_blocks as kq_blocks
from test_native_q80dot import activations, random_blocks as q80_blocks, view_of

HEADS = 3
# scheme -> (rows per head, cols): attn_k_b's [kv_lora, nope] and attn_v_b's [v, kv_lora] of small models
SHAPES = {"q8_0": [(40, 64), (8, 96)], "q5_0": [(8, 64)], "q4_k": [(5, 256)], "q6_k": [(4, 256)],
          "q5_k": [(3, 256)]}
CASES = [(s, r, c) for s, shapes in SHAPES.items() for r, c in shapes]


@pytest.fixture(scope="module")
def rts():
    yield from w8a8_runtimes()


def stacked(rng, scheme, rows, cols):
    """(raw blocks [HEADS * rows, row bytes], its MatrixView, the numpy model of one head's product)."""
    if scheme in ("q8_0", "q5_0"):
        raw = q80_blocks(rng, HEADS * rows, cols, scheme)
        return raw, view_of(raw, HEADS * rows, cols, scheme), lambda x, w: q80_matmul(x, w, rows, cols, scheme)
    raw = kq_blocks(rng, scheme, HEADS * rows, cols)
    view = matrix_view(*packed(raw, scheme, HEADS * rows, cols))
    return raw, view, lambda x, w: kq_matmul(x, w, scheme, rows, cols)


def head_inputs(rng, n, cols, offset, tail=8):
    """[n, HEADS, offset + cols + tail] float32: each head's input at `offset` inside a wider head row (q's nope part
    before its rope part; the attention output at offset 0)."""
    x = rng.standard_normal((n, HEADS, offset + cols + tail)).astype(np.float32)
    x[:, :, offset:offset + cols] = activations(rng, n * HEADS, cols).reshape(n, HEADS, cols)
    return x


@pytest.mark.parametrize("level", simd_params())
@pytest.mark.parametrize("scheme,rows,cols", CASES)
def test_each_heads_product_is_llama_cpps_arithmetic_on_every_level(rts, level, scheme, rows, cols):
    rng = np.random.default_rng(rows * cols + len(scheme))
    raw, view, model = stacked(rng, scheme, rows, cols)
    heads = split_rows(view, HEADS)
    assert [(h.dtype, h.rows, h.cols) for h in heads] == [(view.dtype, rows, cols)] * HEADS
    for offset in (0, 16):
        x = head_inputs(rng, 17, cols, offset)
        want = np.stack([model(x[:, h, offset:offset + cols], raw[h * rows:(h + 1) * rows]) for h in range(HEADS)],
                        axis=1)
        with simd_force(level):
            for threads in (1, 2, 3):
                got = rts[threads].matmul_heads(x, heads, HEADS, cols, offset)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (level, threads, offset)
            for n in (1, 2, 5):
                got = rts[2].matmul_heads(np.ascontiguousarray(x[:n]), heads, HEADS, cols, offset)
                assert np.array_equal(got.view(np.uint32), want[:n].view(np.uint32)), (level, n, offset)


@pytest.mark.parametrize("scheme", ["f32", "int8", "int8-g32", "int4-g64", "int6-g64", "int8-minmax", "q8_0"])
def test_views_of_any_encoding_give_the_whole_matrixs_rows(rts, scheme):
    """Per-row and per-group scales move with the rows, a per-matrix scale and zero point are shared: each head's
    product (switch on and off) equals its rows of the whole matrix's."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((HEADS * 6, 128)).astype(np.float32)
    whole = matrix_from_array(w) if scheme == "f32" else quantized_matrix(w, scheme)
    heads = split_rows(whole, HEADS)
    x = rng.standard_normal((5, HEADS, 128)).astype(np.float32)
    for rt in (rts[2], rts["plain"]):
        got = rt.matmul_heads(x, heads, HEADS, 128)
        for h in range(HEADS):
            full = rt.matmul(np.ascontiguousarray(x[:, h]), whole)
            assert np.array_equal(got[:, h], full[:, h * 6:(h + 1) * 6]), (scheme, h)
    assert quantize_matrix(w, scheme)[0].nbytes == sum(v.layout.data_bytes for v in heads)


def test_a_split_that_does_not_divide_the_rows_is_refused():
    view = matrix_from_array(np.ones((6, 32), np.float32))
    for parts in (4, 0, -1):
        with pytest.raises(InvalidArgument, match="cannot be split into"):
            split_rows(view, parts)
    with pytest.raises(InvalidArgument, match="split_rows needs a MatrixView"):
        split_rows(np.ones((6, 32), np.float32), 2)
