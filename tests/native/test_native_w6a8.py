"""int6-g64: the 6-bit encoding (colibri.h CB_I6_G64) and its products.

The stored bit order, the quantizer against a numpy model (amax / 31 per group of 64, round half to even),
the weight-only product against a numpy model of kernels.h's sequence and w6a8 (int6 weights x the w8a8
per-token int8 activations) against a numpy model of its integer arithmetic (w6a8_ref.py), all with exact
equality; the same bits on every SIMD level, batch size, row subset and thread count for dense matrices,
experts and whole MoE layers; and a quality bound against the float64 reference on the original weights.
"""
import numpy as np
import pytest

from colibri_dist.format.quantize import dequantize, pack_int6, pack_matrix, quantize_matrix, unpack_int6
from colibri_dist.native import Runtime, embed, quantized_matrix, simd_force
from native_helpers import AVAILABLE_LEVELS, cosine, ffn_ref, rand_expert, random_layer, simd_params, view_of
from w6a8_ref import f32_matmul, int6_parts, w6a8_matmul

SCHEME = "int6-g64"
SHAPES = [(37, 64), (20, 150), (9, 333), (70, 96), (131, 67), (5, 1), (3, 7), (12, 2048)]
TOKENS = (1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33)


@pytest.fixture(scope="module")
def rts():
    r = {t: Runtime(threads=t, w8a8=True) for t in (1, 2, 3)}
    r["plain"] = Runtime(threads=2)
    r["plain1"] = Runtime(threads=1)
    yield r
    for v in r.values():
        v.close()


def _matrix(rows, cols, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)
    x = rng.standard_normal((max(TOKENS), cols)).astype(np.float32)
    x[3] *= 1e-3                                              # a tiny row: its own scale
    x[5] = 0.0                                                # an all-zero row: scale 0, output 0
    return w, quantized_matrix(w, SCHEME), x


def test_bit_order_is_a_little_endian_stream_of_6_bit_codes():
    """colibri.h: code c at bits 6c .. 6c+5 of its row, two's complement; the bits past the last code are 0."""
    q = np.array([[1, -1, 31, -31, 5], [-32, 0, 0, 0, 0]], np.int8)
    packed = pack_int6(q)
    assert packed.shape == (2, 4)                             # ceil(5 * 6 / 8)
    v = 1 | (0x3F << 6) | (31 << 12) | ((-31 & 0x3F) << 18)
    assert packed[0].tolist() == [v & 0xFF, (v >> 8) & 0xFF, v >> 16, 5]
    assert packed[1].tolist() == [0x20, 0, 0, 0]
    assert np.array_equal(unpack_int6(packed, 5), q)
    rng = np.random.default_rng(1)
    for cols in (1, 2, 3, 4, 5, 63, 64, 65, 131):
        q = rng.integers(-32, 32, (3, cols)).astype(np.int8)
        assert pack_int6(q).shape == (3, (cols * 6 + 7) // 8) and np.array_equal(unpack_int6(pack_int6(q), cols), q)


@pytest.mark.parametrize("rows,cols", [(7, 64), (5, 150), (3, 1), (4, 7), (2, 130)])
def test_quantizer_equals_the_numpy_model_and_dequantize_the_kernels_decode(rows, cols):
    rng = np.random.default_rng(rows * cols)
    w = (rng.standard_normal((rows, cols)) * 0.3).astype(np.float32)
    w[0, :min(cols, 64)] = 0.0                                # an all-zero group: scale 0, codes 0
    data, scales, zero = quantize_matrix(w, SCHEME)
    ng = -(-cols // 64)
    pad = np.zeros((rows, ng * 64), np.float32)
    pad[:, :cols] = w
    want_s = (np.abs(pad.reshape(rows, ng, 64)).max(axis=2) / np.float32(31)).astype(np.float32)
    per_col = np.repeat(want_s, 64, axis=1)[:, :cols]
    want_q = np.clip(np.rint(w / np.where(per_col > 0, per_col, np.float32(1))), -31, 31).astype(np.int8)
    assert zero is None and np.array_equal(scales, want_s.reshape(-1))
    assert np.array_equal(unpack_int6(data, cols), want_q)
    assert np.abs(want_q).max() <= 31
    blob, layout = pack_matrix(w, SCHEME)
    back = dequantize(blob, layout)
    assert np.array_equal(back, (want_q.astype(np.float32) * per_col).astype(np.float32))
    assert np.abs(back - w).max() <= 0.5 * per_col.max() * (1 + 1e-6)
    view = quantized_matrix(w, SCHEME)
    assert np.array_equal(embed(view, np.arange(rows)), back)             # the C row decoder: the same values
    assert np.array_equal(int6_parts(view)[0], want_q)                     # the reference's bit-by-bit reading


@pytest.mark.parametrize("level", simd_params())
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_weight_only_product_equals_the_numpy_sequence_on_every_level(rts, level, rows, cols):
    _, view, x = _matrix(rows, cols, rows + cols)
    ref = f32_matmul(x, view)
    with simd_force(level):
        full = rts["plain"].matmul(x, view)
        assert np.array_equal(full, ref), level
        for n in TOKENS:
            assert np.array_equal(rts["plain1"].matmul(np.ascontiguousarray(x[:n]), view), ref[:n]), (level, n)
        assert np.array_equal(rts["plain"].matmul(np.ascontiguousarray(x[9:10]), view)[0], ref[9])   # alone


@pytest.mark.parametrize("level", simd_params())
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_w6a8_matmul_equals_the_numpy_integer_model(rts, level, rows, cols):
    _, view, x = _matrix(rows, cols, 7 * rows + cols)
    ref = w6a8_matmul(x, view)
    with simd_force(level):
        assert np.array_equal(rts[3].matmul(x, view), ref), level
        for n in TOKENS:
            assert np.array_equal(rts[2].matmul(np.ascontiguousarray(x[:n]), view), ref[:n]), (level, n)
        for t in (0, 9, 32):                                               # a token alone, anywhere in the batch
            assert np.array_equal(rts[1].matmul(np.ascontiguousarray(x[t:t + 1]), view)[0], ref[t]), (level, t)
    assert not np.array_equal(rts["plain"].matmul(x, view), ref)          # the switch really changes the math


def test_w6a8_matmul_many_shares_one_prepared_input(rts):
    """q/k/v style: several int6 matrices (and an int4 one) on one input give each matrix's own product."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 130)).astype(np.float32)
    ws = [(rng.standard_normal((r, 130)) * 0.1).astype(np.float32) for r in (40, 9, 40)]
    views = [quantized_matrix(ws[0], SCHEME), quantized_matrix(ws[1], SCHEME), quantized_matrix(ws[2], "int4-g64")]
    outs = rts[2].matmul_many(x, views)
    assert np.array_equal(outs[0], w6a8_matmul(x, views[0])) and np.array_equal(outs[1], w6a8_matmul(x, views[1]))
    assert np.array_equal(outs[2], rts[1].matmul(x, views[2]))


@pytest.mark.parametrize("hidden,inter", [(64, 32), (150, 83)])
def test_w6a8_expert_same_bits_on_every_level_batch_rows_and_threads(rts, hidden, inter):
    rng = np.random.default_rng(hidden + inter)
    view = view_of(rand_expert(rng, hidden, inter), SCHEME)
    x = rng.standard_normal((33, hidden)).astype(np.float32)
    with simd_force("scalar"):
        ref = rts[1].expert_forward(x, view)
        plain = rts["plain"].expert_forward(x, view)
    for level in AVAILABLE_LEVELS:
        with simd_force(level):
            for t in (1, 2, 3):
                assert np.array_equal(rts[t].expert_forward(x, view), ref), (level, t)
            for n in (1, 2, 5, 16, 17):
                assert np.array_equal(rts[2].expert_forward(np.ascontiguousarray(x[:n]), view), ref[:n]), (level, n)
            rows = np.array([20, 3, 3, 7, 0, 32])
            assert np.array_equal(rts[3].expert_forward(x, view, rows=rows), ref[rows]), level
            assert np.array_equal(rts["plain"].expert_forward(x, view), plain), level
    assert not np.array_equal(plain, ref)


def test_w6a8_quality_against_the_float_reference(rts):
    """Cosine to the float64 FFN on the original weights: 6 bits sit between int4-g64 and int8."""
    rng = np.random.default_rng(8)
    w = rand_expert(rng, 256, 128)
    x = rng.standard_normal((32, 256)).astype(np.float32)
    ref = ffn_ref(x, *w)
    views = {s: view_of(w, s) for s in ("int4-g64", SCHEME, "int8")}
    c = {s: (cosine(rts["plain"].expert_forward(x, v), ref), cosine(rts[2].expert_forward(x, v), ref))
         for s, v in views.items()}
    print({s: f"weight-only {a:.6f}, integer path {b:.6f}" for s, (a, b) in c.items()})
    for path in (0, 1):                                   # measured: 0.985 < 0.9991-0.9992 < 0.9999
        assert c["int4-g64"][path] < c[SCHEME][path] < c["int8"][path] and c[SCHEME][path] >= 0.998
    assert c[SCHEME][0] >= 0.999 and c[SCHEME][1] >= c[SCHEME][0] - 0.002
    assert c["int4-g64"][0] < c[SCHEME][0] and c["int4-g64"][1] < c[SCHEME][1]
