"""The q8_0 encoding (llama.cpp's Q8_0 blocks kept as they are): the decode is (float)q * (float)d per block, a short
last block is the zero-padded one, dense products give the same bits on every SIMD level. (Expert kernels on every
level, odd shapes included, and cb_embed: test_native_kernels.py / test_native_model_ops.py, where q8_0 is a row of
native_helpers.SCHEMES; equality with gguf.quants: tests/format/test_format_gguf.py.)"""
import numpy as np
import pytest

from colibri_dist.format.quantize import dequantize, pack_matrix, quantize_q8_0
from colibri_dist.native import Runtime, matrix_view, simd_force
from native_helpers import simd_params

PATHS = simd_params()


@pytest.fixture(scope="module")
def rt():
    with Runtime(threads=2) as r:
        yield r


def test_decode_is_code_times_block_scale():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((3, 64)) * 0.3).astype(np.float32)
    blob, layout = pack_matrix(w, "q8_0")
    raw = blob[:layout.data_bytes].reshape(3, 2, 34)
    d = raw[:, :, :2].copy().view(np.float16).astype(np.float32)            # [3, 2, 1]
    q = raw[:, :, 2:].view(np.int8).astype(np.float32)                      # [3, 2, 32]
    assert np.array_equal(dequantize(blob, layout), (q * d).reshape(3, 64))
    assert np.abs(dequantize(blob, layout) - w).max() <= np.abs(w).max() / 127 * 0.51 * 1.01
    assert layout.data_bytes == 3 * 2 * 34 and layout.scale_offset == -1


@pytest.mark.parametrize("path", [p for p in PATHS if p.values[0] != "scalar"])
def test_dense_matmul_is_bit_identical_to_scalar(rt, path):
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((67, 128)) * 0.1).astype(np.float32)     # 67 rows: every tile shape and a tail
    view = matrix_view(*pack_matrix(w, "q8_0"))
    x = rng.standard_normal((5, 128)).astype(np.float32)
    outs = {}
    for level in (path, "scalar"):
        with simd_force(level):
            outs[level] = rt.matmul(x, view)
    assert np.array_equal(outs[path], outs["scalar"])


def test_a_short_last_block_is_the_zero_padded_block():
    w = (np.random.default_rng(1).standard_normal((3, 48)) * 0.2).astype(np.float32)
    padded = np.concatenate([w, np.zeros((3, 16), np.float32)], axis=1)
    assert np.array_equal(quantize_q8_0(w), quantize_q8_0(padded))
    blob, layout = pack_matrix(w, "q8_0")
    assert layout.data_bytes == 3 * 2 * 34
    assert np.array_equal(dequantize(blob, layout), dequantize(*pack_matrix(padded, "q8_0"))[:, :48])
