"""q4_k_r8: llama.cpp's Q4_K blocks laid out 8 rows at a time (format/kquants_r8.py, native/src/kquants_r8.h).

The layout is a permutation of the blocks' bytes (interleave / deinterleave round-trip; a unit's bytes sit where
colibri.h says); the values are gguf.quants' dequantization of the Q4_K blocks bit for bit (numpy, the scalar row
decoder, every level's f32 matmul); with w8a8 on, every level, token count and thread count gives the numpy model of
ggml's Q4_K formula (kq_ref.kq_matmul on the plain blocks), i.e. exactly q4_k's outputs, dense and as an expert
(q4_k_r8 gate / up with a q6_k down as an imported Q4_K_M has); rows not in whole groups of 8 are refused by name.
(Row ranges that cut an 8-row group run in native/tests/kq_shapes.c.)
"""
import dataclasses

import numpy as np
import pytest

from colibri_dist.errors import ColibriError, InvalidArgument
from colibri_dist.format import kquants_r8
from colibri_dist.format.quantize import Encoded, dequantize, pack_expert, pack_matrix
from colibri_dist.native import embed, expert_view, matrix_view, simd_force
from kq_ref import kq_matmul
from native_helpers import AVAILABLE_LEVELS, assert_dense_equals, assert_experts_equal, simd_params, w8a8_runtimes
from test_native_kdot import TOKENS, activations
from test_native_kquants import gguf, random_blocks


@pytest.fixture(scope="module")
def rts():
    yield from w8a8_runtimes()


def r8_view(raw, rows, cols):
    return matrix_view(*pack_matrix(Encoded("q4_k", rows, cols, raw), "q4_k_r8"))


def test_layout_is_the_blocks_bytes_permuted():
    rng = np.random.default_rng(1)
    raw = random_blocks(rng, "q4_k", 16, 512)
    r8 = kquants_r8.interleave(raw, 16, 512)
    assert r8.shape == raw.shape and np.array_equal(np.sort(r8, axis=None), np.sort(raw, axis=None))
    assert np.array_equal(kquants_r8.deinterleave(r8, 16, 512), raw)
    blk = raw.reshape(16, 2, 144)
    unit = r8.reshape(2, 2, 1152)[1, 1]                        # rows 8..15, block column 1
    for j in range(8):
        assert np.array_equal(unit[2 * j:2 * j + 2], blk[8 + j, 1, 0:2])           # d
        assert np.array_equal(unit[16 + 2 * j:18 + 2 * j], blk[8 + j, 1, 2:4])     # dmin
        assert np.array_equal(unit[32 + 12 * j:44 + 12 * j], blk[8 + j, 1, 4:16])  # scales
    for pc in range(16):
        for q, row in enumerate(kquants_r8.ROWS):
            got = unit[128 + 64 * pc + 8 * q:128 + 64 * pc + 8 * q + 8]
            assert np.array_equal(got, blk[8 + row, 1, 16 + 8 * pc:24 + 8 * pc])


def test_values_are_gguf_dequantize_of_the_blocks():
    rng = np.random.default_rng(2)
    raw = random_blocks(rng, "q4_k", 24, 768)
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_K).astype(np.float32)
    blob, layout = pack_matrix(Encoded("q4_k", 24, 768, raw), "q4_k_r8")
    assert layout.data_bytes == raw.size and not np.array_equal(blob[:raw.size].reshape(raw.shape), raw)
    assert np.array_equal(dequantize(blob, layout).view(np.uint32), want.view(np.uint32))
    got = embed(matrix_view(blob, layout), np.arange(24)[::-1])          # the scalar row decoder (decode.c)
    assert np.array_equal(got.view(np.uint32), want[::-1].view(np.uint32))


@pytest.mark.parametrize("level", AVAILABLE_LEVELS)
def test_every_level_f32_matmul_decodes_the_gguf_values(level):
    """w8a8 off: matmul by one-hot rows returns each weight (fma(v, 1, 0) + zeros: exact)."""
    from colibri_dist.native import Runtime
    rng = np.random.default_rng(3)
    raw = random_blocks(rng, "q4_k", 16, 256)
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_K).astype(np.float32)
    with Runtime(threads=2) as rt, simd_force(level):
        got = rt.matmul(np.eye(256, dtype=np.float32), r8_view(raw, 16, 256))
    assert np.array_equal(got.T.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("level", simd_params())
@pytest.mark.parametrize("rows", [8, 72, 200])
def test_w8a8_every_level_tokens_and_threads_give_q4_ks_bits(rts, level, rows):
    rng = np.random.default_rng(7 * rows)
    raw = random_blocks(rng, "q4_k", rows, 512)
    x = activations(rng, max(TOKENS), 512)
    ref = kq_matmul(x, raw, "q4_k", rows, 512)
    assert_dense_equals(rts, level, x, r8_view(raw, rows, 512), ref, TOKENS)
    with simd_force(level):
        plain = matrix_view(*pack_matrix(Encoded("q4_k", rows, 512, raw), "q4_k"))
        assert np.array_equal(rts[2].matmul(x, plain), ref)


def test_expert_with_a_q6_k_down_equals_the_q4_k_expert_on_every_level(rts):
    rng = np.random.default_rng(9)
    hidden, inter = 512, 256
    g, u = random_blocks(rng, "q4_k", inter, hidden), random_blocks(rng, "q4_k", inter, hidden)
    down = Encoded("q6_k", hidden, inter, random_blocks(rng, "q6_k", hidden, inter))
    views = [expert_view(*pack_expert(Encoded("q4_k", inter, hidden, g), Encoded("q4_k", inter, hidden, u), down,
                                      (s, s, "q6_k"))) for s in ("q4_k", "q4_k_r8")]
    x = activations(rng, 33, hidden) * np.float32(0.05)
    assert_experts_equal(rts, x, views[1])
    with simd_force("scalar"):
        want = rts[1].expert_forward(x, views[0])
    for level in AVAILABLE_LEVELS:
        with simd_force(level):
            assert np.array_equal(rts[2].expert_forward(x, views[1]), want), level


def test_rows_not_in_whole_groups_of_8_are_refused():
    rng = np.random.default_rng(4)
    with pytest.raises(InvalidArgument, match=r"q4_k_r8 needs rows a multiple of 8.*\[12, 256\]"):
        pack_matrix(rng.standard_normal((12, 256)).astype(np.float32), "q4_k_r8")
    raw = random_blocks(rng, "q4_k", 12, 256)
    with pytest.raises(InvalidArgument, match=r"q4_k_r8 needs rows a multiple of 8"):
        pack_matrix(Encoded("q4_k", 12, 256, raw), "q4_k_r8")
    blob, layout = pack_matrix(Encoded("q4_k", 16, 256, random_blocks(rng, "q4_k", 16, 256)), "q4_k_r8")
    bad = dataclasses.replace(layout, rows=12)
    with pytest.raises(ColibriError, match=r"q4_k_r8 stores rows in groups of 8, got 12x256"):
        embed(matrix_view(blob, bad), [0])
