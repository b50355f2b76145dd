"""The q4_k, q5_k and q6_k encodings (llama.cpp's Q4_K / Q5_K / Q6_K super-blocks kept as they are): the native
decode equals gguf.quants.dequantize bit for bit on random blocks (random codes, scales and finite f16 d / dmin), through
cb_embed (the scalar decoder) and through every SIMD level's matmul (the 8-lane decoders); expert and dense
products give the same bits on every level on odd row counts; cols that are not whole super-blocks are refused."""
import numpy as np
import pytest

from colibri_dist.errors import ColibriError
from colibri_dist.format.kquants import BLOCK_BYTES, DEQUANTIZE
from colibri_dist.format.layout import MatrixLayout
from colibri_dist.format.quantize import Encoded, dequantize, pack_matrix
from colibri_dist.native import Runtime, embed, matrix_view, simd_force
from native_helpers import AVAILABLE_LEVELS, decoded, ffn_ref, rand_expert, simd_params, view_of

gguf = pytest.importorskip("gguf")
KQ = ["q4_k", "q5_k", "q6_k"]
QTYPE = {s: gguf.GGMLQuantizationType[s.upper()] for s in KQ}
HALVES = {"q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}           # byte offsets of the f16 factors in a block


@pytest.fixture(scope="module")
def rt():
    with Runtime(threads=2) as r:
        yield r


def random_blocks(rng, scheme, rows, cols):
    """uint8 [rows, row bytes]: random code and scale bytes, f16 factors finite over several magnitudes."""
    n = rows * cols // 256
    b = rng.integers(0, 256, (n, BLOCK_BYTES[scheme]), dtype=np.uint8)
    for o in HALVES[scheme]:
        h = (rng.standard_normal(n) * rng.choice([1e-6, 1e-3, 1.0, 300.0], n)).astype(np.float16)
        b[:, o:o + 2] = h.view(np.uint8).reshape(n, 2)
    return b.reshape(rows, -1)


def packed(raw, scheme, rows, cols):
    return pack_matrix(Encoded(scheme, rows, cols, raw), scheme)


@pytest.mark.parametrize("scheme", KQ)
def test_decode_equals_gguf_dequantize_bit_for_bit(scheme):
    rng = np.random.default_rng(11)
    raw = random_blocks(rng, scheme, 37, 512)
    want = gguf.quants.dequantize(raw, QTYPE[scheme]).astype(np.float32)
    blob, layout = packed(raw, scheme, 37, 512)
    assert layout.data_bytes == raw.size and np.array_equal(blob[:raw.size].reshape(raw.shape), raw)
    assert np.array_equal(DEQUANTIZE[scheme](raw, 37, 512).view(np.uint32), want.view(np.uint32))
    assert np.array_equal(dequantize(blob, layout).view(np.uint32), want.view(np.uint32))
    got = embed(matrix_view(blob, layout), np.arange(37))              # the scalar row decoder (decode.c)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("level", AVAILABLE_LEVELS)
@pytest.mark.parametrize("scheme", KQ)
def test_every_level_decodes_the_gguf_values(rt, scheme, level):
    """matmul by one-hot rows returns each weight as its level's decoder made it (fma(v, 1, 0) + zeros: exact)."""
    rng = np.random.default_rng(12)
    raw = random_blocks(rng, scheme, 19, 256)
    want = gguf.quants.dequantize(raw, QTYPE[scheme]).astype(np.float32)
    with simd_force(level):
        got = rt.matmul(np.eye(256, dtype=np.float32), matrix_view(*packed(raw, scheme, 19, 256)))
    assert np.array_equal(got.T, want)


@pytest.mark.parametrize("path", [p for p in simd_params() if p.values[0] != "scalar"])
@pytest.mark.parametrize("scheme", KQ)
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_dense_matmul_is_bit_identical_to_scalar(rt, path, scheme, n):
    rng = np.random.default_rng(5 + n)
    raw = random_blocks(rng, scheme, 67, 512)                 # 67 rows: every tile shape and a tail
    view = matrix_view(*packed(raw, scheme, 67, 512))
    x = rng.standard_normal((n, 512)).astype(np.float32)
    outs = {}
    for level in (path, "scalar"):
        with simd_force(level):
            outs[level] = rt.matmul(x, view)
    assert np.array_equal(outs[path], outs["scalar"])


@pytest.mark.parametrize("path", simd_params())
@pytest.mark.parametrize("scheme", KQ)
@pytest.mark.parametrize("n", [1, 4, 9])
def test_expert_forward_matches_decoded_reference_and_scalar(rt, path, scheme, n):
    rng = np.random.default_rng(21 + n)
    view = view_of(rand_expert(rng, 256, 512), scheme)
    x = rng.standard_normal((n, 256)).astype(np.float32)
    with simd_force(path):
        a = rt.expert_forward(x, view)
    with simd_force("scalar"):
        b = rt.expert_forward(x, view)
    assert np.array_equal(a, b)
    ref = ffn_ref(x, *decoded(view))
    assert np.abs(a - ref).max() <= 2e-5 * np.abs(ref).max()


@pytest.mark.parametrize("scheme", KQ)
def test_our_quantizer_writes_blocks_gguf_reads(scheme):
    w = (np.random.default_rng(3).standard_normal((5, 768)) * 0.1).astype(np.float32)
    blob, layout = pack_matrix(w, scheme)
    raw = blob[:layout.data_bytes].reshape(5, -1)
    back = gguf.quants.dequantize(raw, QTYPE[scheme])
    assert np.array_equal(dequantize(blob, layout), back)
    bound = {"q4_k": 0.03, "q5_k": 0.015, "q6_k": 0.008}[scheme]      # min/max: step / 2 + the 6-bit scale error
    assert np.abs(back - w).max() <= bound


@pytest.mark.parametrize("scheme", KQ)
def test_cols_not_whole_super_blocks_are_refused(rt, scheme):
    with pytest.raises(ColibriError, match=f"{scheme} needs cols a multiple of 256"):
        pack_matrix(np.zeros((2, 300), np.float32), scheme)
    raw = random_blocks(np.random.default_rng(1), scheme, 2, 256)
    blob, layout = packed(raw, scheme, 2, 256)
    bad = MatrixLayout(**{**layout.__dict__, "cols": 255})
    with pytest.raises((ColibriError, ValueError), match="multiple of 256"):
        rt.matmul(np.zeros((1, 255), np.float32), matrix_view(blob, bad))
