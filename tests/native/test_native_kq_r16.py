"""q6_k_r16: llama.cpp's Q6_K blocks laid out 16 rows at a time (format/kquants_r16.py, native/src/kquants_r16.h).

The layout is a permutation of the blocks' bytes (interleave / deinterleave round-trip; a unit's bytes sit where
colibri.h says); the values are gguf.quants' dequantization of the Q6_K blocks bit for bit (numpy, the scalar row
decoder, every level's f32 matmul, which equals q6_k's); with w8a8 on, every level, token count and thread count
gives the numpy model of q6_k_r16's own order (kq_ref: one integer per super-block, kernels_kq.c), dense and as an
expert's down projection; rows not in whole groups of 16 are refused by name. (Row ranges that cut a 16-row group
run in native/tests/kq_shapes.c.)
"""
import dataclasses

import numpy as np
import pytest

from colibri_dist.errors import ColibriError, InvalidArgument
from colibri_dist.format import kquants_r16
from colibri_dist.format.quantize import Encoded, dequantize, pack_expert, pack_matrix
from colibri_dist.native import embed, expert_view, matrix_view, simd_force
from kq_ref import kq_matmul
from native_helpers import AVAILABLE_LEVELS, assert_dense_equals, assert_experts_equal, simd_params, w8a8_runtimes
from test_native_kdot import TOKENS, activations
from test_native_kquants import gguf, random_blocks


@pytest.fixture(scope="module")
def rts():
    yield from w8a8_runtimes()


def r16_view(raw, rows, cols):
    return matrix_view(*pack_matrix(Encoded("q6_k", rows, cols, raw), "q6_k_r16"))


def test_layout_is_the_blocks_bytes_permuted():
    rng = np.random.default_rng(1)
    raw = random_blocks(rng, "q6_k", 32, 512)
    r16 = kquants_r16.interleave(raw, 32, 512)
    assert r16.shape == raw.shape and np.array_equal(np.sort(r16, axis=None), np.sort(raw, axis=None))
    assert np.array_equal(kquants_r16.deinterleave(r16, 32, 512), raw)
    blk = raw.reshape(32, 2, 210)
    unit = r16.reshape(2, 2, 3360)[1, 1]                       # rows 16..31, block column 1
    for j in range(16):
        assert np.array_equal(unit[2 * j:2 * j + 2], blk[16 + j, 1, 208:210])                 # d
        for s in range(16):
            assert unit[32 + 16 * s + j] == blk[16 + j, 1, 192 + s]                          # scale s of row j
    for h in range(2):
        for i in range(8):
            for k, start in enumerate((64 * h + 4 * i, 64 * h + 32 + 4 * i, 128 + 32 * h + 4 * i)):
                piece = unit[288 + 64 * (24 * h + 3 * i + k):][:64].reshape(16, 4)
                assert np.array_equal(piece, blk[16:32, 1, start:start + 4]), (h, i, k)


def test_values_are_gguf_dequantize_of_the_blocks():
    rng = np.random.default_rng(2)
    raw = random_blocks(rng, "q6_k", 48, 768)
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q6_K).astype(np.float32)
    blob, layout = pack_matrix(Encoded("q6_k", 48, 768, raw), "q6_k_r16")
    assert layout.data_bytes == raw.size and not np.array_equal(blob[:raw.size].reshape(raw.shape), raw)
    assert np.array_equal(dequantize(blob, layout).view(np.uint32), want.view(np.uint32))
    got = embed(matrix_view(blob, layout), np.arange(48)[::-1])          # the scalar row decoder (decode.c)
    assert np.array_equal(got.view(np.uint32), want[::-1].view(np.uint32))


@pytest.mark.parametrize("level", AVAILABLE_LEVELS)
def test_every_level_f32_matmul_decodes_the_gguf_values_as_q6_k(level):
    """w8a8 off: matmul by one-hot rows returns each weight (fma(v, 1, 0) plus zeros: exact, a -0.0 weight as +0.0),
    and any input gives q6_k's bits (the exact-weights path gathers each group back into plain rows)."""
    from colibri_dist.native import Runtime
    rng = np.random.default_rng(3)
    raw = random_blocks(rng, "q6_k", 32, 256)
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q6_K).astype(np.float32)
    x = activations(rng, 5, 256)
    plain = matrix_view(*pack_matrix(Encoded("q6_k", 32, 256, raw), "q6_k"))
    with Runtime(threads=2) as rt, simd_force(level):
        got = rt.matmul(np.eye(256, dtype=np.float32), r16_view(raw, 32, 256))
        mine, theirs = rt.matmul(x, r16_view(raw, 32, 256)), rt.matmul(x, plain)
    assert np.array_equal(mine.view(np.uint32), theirs.view(np.uint32))
    assert np.array_equal(got.T, want)


@pytest.mark.parametrize("level", simd_params())
@pytest.mark.parametrize("rows", [16, 80, 208])
def test_w8a8_every_level_tokens_and_threads_give_the_one_integer_order(rts, level, rows):
    rng = np.random.default_rng(7 * rows)
    raw = random_blocks(rng, "q6_k", rows, 512)
    x = activations(rng, max(TOKENS), 512)
    ref = kq_matmul(x, raw, "q6_k_r16", rows, 512)
    assert_dense_equals(rts, level, x, r16_view(raw, rows, 512), ref, TOKENS)
    near = kq_matmul(x, raw, "q6_k", rows, 512)          # ggml's lanes: the same sums, other float rounding
    assert np.allclose(ref, near, rtol=1e-5, atol=1e-5 * np.abs(near).max())


def test_expert_with_a_q6_k_r16_down_equals_the_scalar_on_every_level(rts):
    rng = np.random.default_rng(9)
    hidden, inter = 512, 256
    g, u = random_blocks(rng, "q4_k", inter, hidden), random_blocks(rng, "q4_k", inter, hidden)
    down = Encoded("q6_k", hidden, inter, random_blocks(rng, "q6_k", hidden, inter))
    view = expert_view(*pack_expert(Encoded("q4_k", inter, hidden, g), Encoded("q4_k", inter, hidden, u), down,
                                    ("q4_k_r8", "q4_k_r8", "q6_k_r16")))
    x = activations(rng, 33, hidden) * np.float32(0.05)
    assert_experts_equal(rts, x, view)
    with simd_force("scalar"):
        want = rts[1].expert_forward(x, view)
    for level in AVAILABLE_LEVELS:
        with simd_force(level):
            assert np.array_equal(rts[2].expert_forward(x, view), want), level


def test_rows_not_in_whole_groups_of_16_are_refused():
    rng = np.random.default_rng(4)
    with pytest.raises(InvalidArgument, match=r"q6_k_r16 needs rows a multiple of 16.*\[24, 256\]"):
        pack_matrix(rng.standard_normal((24, 256)).astype(np.float32), "q6_k_r16")
    raw = random_blocks(rng, "q6_k", 24, 256)
    with pytest.raises(InvalidArgument, match=r"q6_k_r16 needs rows a multiple of 16"):
        pack_matrix(Encoded("q6_k", 24, 256, raw), "q6_k_r16")
    blob, layout = pack_matrix(Encoded("q6_k", 32, 256, random_blocks(rng, "q6_k", 32, 256)), "q6_k_r16")
    bad = dataclasses.replace(layout, rows=24)
    with pytest.raises(ColibriError, match=r"q6_k_r16 stores rows in groups of 16, got 24x256"):
        embed(matrix_view(blob, bad), [0])
