"""llama.cpp's blocks of 32 / 256 kept as they are (mxfp4: gpt-oss's MXFP4; iq4_xs, iq4_nl: the i-quants'
IQ4_XS / IQ4_NL; q5_0, q5_1: llama-quantize's fallbacks Q5_0 / Q5_1): the native decode equals gguf.quants.dequantize bit for bit on random blocks (random codes and
sub-block scales, every E8M0 byte, finite f16 d over several magnitudes), through cb_embed (the scalar decoder)
and through every SIMD level's matmul (the 8-lane decoders); expert and dense products give the same bits on
every level on odd row counts; our quantizers write blocks gguf reads (mxfp4, q5_0, q5_1: the very bytes of
gguf.quants.quantize, ggml's reference quantizers); cols that are not whole blocks are refused
naming the multiple."""
import numpy as np
import pytest

from colibri_dist.encodings import BY_NAME
from colibri_dist.errors import ColibriError
from colibri_dist.format.layout import MatrixLayout
from colibri_dist.format.quantize import Encoded, dequantize, pack_matrix
from colibri_dist.native import Runtime, embed, matrix_view, simd_force
from native_helpers import AVAILABLE_LEVELS, decoded, ffn_ref, rand_expert, simd_params, view_of

gguf = pytest.importorskip("gguf")
SCHEMES = ["mxfp4", "iq4_xs", "iq4_nl", "q5_0", "q5_1"]
QTYPE = {s: gguf.GGMLQuantizationType[s.upper()] for s in SCHEMES}


@pytest.fixture(scope="module")
def rt():
    with Runtime(threads=2) as r:
        yield r


def random_blocks(rng, scheme, rows, cols, scales=None):
    """uint8 [rows, row bytes]: random code (and iq4_xs sub-block scale) bytes; mxfp4's E8M0 bytes drawn from
    `scales` (default 0 .. 199: subnormal to 2^72, none overflowing), the i-quants' f16 d finite over several
    magnitudes."""
    e = BY_NAME[scheme]
    n = rows * cols // e.group
    b = rng.integers(0, 256, (n, e.block_bytes), dtype=np.uint8)
    if scheme == "mxfp4":
        b[:, 0] = rng.choice(np.asarray(scales if scales is not None else np.arange(0, 200), np.uint8), n)
    else:
        for o in (0, 2) if scheme == "q5_1" else (0,):         # d (and q5_1's m)
            h = (rng.standard_normal(n) * rng.choice([1e-6, 1e-3, 1.0, 300.0], n)).astype(np.float16)
            b[:, o:o + 2] = h.view(np.uint8).reshape(n, 2)
    return b.reshape(rows, -1)


def packed(raw, scheme, rows, cols):
    return pack_matrix(Encoded(scheme, rows, cols, raw), scheme)


def same_bits(a, b):
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_decode_equals_gguf_dequantize_bit_for_bit(scheme):
    from colibri_dist.format.quantize import _WHOLE_BLOCK_DEQUANTIZE
    rng = np.random.default_rng(11)
    raw = random_blocks(rng, scheme, 37, 512, scales=np.arange(256) if scheme == "mxfp4" else None)
    want = gguf.quants.dequantize(raw, QTYPE[scheme]).astype(np.float32)
    blob, layout = packed(raw, scheme, 37, 512)
    assert layout.data_bytes == raw.size and np.array_equal(blob[:raw.size].reshape(raw.shape), raw)
    assert same_bits(_WHOLE_BLOCK_DEQUANTIZE[scheme](raw, 37, 512), want)
    assert same_bits(dequantize(blob, layout), want)
    got = embed(matrix_view(blob, layout), np.arange(37))              # the scalar row decoder (decode.c)
    assert same_bits(got, want)


@pytest.mark.parametrize("level", AVAILABLE_LEVELS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_level_decodes_the_gguf_values(rt, scheme, level):
    """matmul by one-hot rows returns each weight as its level's decoder made it (fma(v, 1, 0) + zeros: exact, but
    a -0 weight (an iq4_xs sub-block with ls = 32) comes out +0: equal as values)."""
    rng = np.random.default_rng(12)
    raw = random_blocks(rng, scheme, 19, 256)
    want = gguf.quants.dequantize(raw, QTYPE[scheme]).astype(np.float32)
    with simd_force(level):
        got = rt.matmul(np.eye(256, dtype=np.float32), matrix_view(*packed(raw, scheme, 19, 256)))
    assert np.array_equal(got.T, want)


@pytest.mark.parametrize("path", [p for p in simd_params() if p.values[0] != "scalar"])
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_dense_matmul_is_bit_identical_to_scalar(rt, path, scheme, n):
    rng = np.random.default_rng(5 + n)
    raw = random_blocks(rng, scheme, 67, 512, scales=np.arange(110, 135))    # 67 rows: every tile shape, a tail
    view = matrix_view(*packed(raw, scheme, 67, 512))
    x = rng.standard_normal((n, 512)).astype(np.float32)
    outs = {}
    for level in (path, "scalar"):
        with simd_force(level):
            outs[level] = rt.matmul(x, view)
    assert np.isfinite(outs["scalar"]).all() and np.array_equal(outs[path], outs["scalar"])


@pytest.mark.parametrize("path", simd_params())
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("n", [1, 4, 9])
def test_expert_forward_matches_decoded_reference_and_scalar(rt, path, scheme, n):
    rng = np.random.default_rng(21 + n)
    view = view_of(rand_expert(rng, 256, 256), scheme)
    x = rng.standard_normal((n, 256)).astype(np.float32)
    with simd_force(path):
        a = rt.expert_forward(x, view)
    with simd_force("scalar"):
        b = rt.expert_forward(x, view)
    assert np.array_equal(a, b)
    ref = ffn_ref(x, *decoded(view))
    assert np.abs(a - ref).max() <= 2e-5 * np.abs(ref).max()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_our_quantizer_writes_blocks_gguf_reads(scheme):
    w = (np.random.default_rng(3).standard_normal((5, 768)) * 0.1).astype(np.float32)
    w[0, :32] = 0                                              # an all-zero block
    blob, layout = pack_matrix(w, scheme)
    raw = blob[:layout.data_bytes].reshape(5, -1)
    back = gguf.quants.dequantize(raw, QTYPE[scheme])
    assert same_bits(dequantize(blob, layout), back)
    if scheme in ("mxfp4", "q5_0", "q5_1"):                    # ggml's reference quantizer, as gguf's writes it
        assert np.array_equal(raw, gguf.quants.quantize(w, QTYPE[scheme]))
    runs = np.abs(w).reshape(-1, 32).max(axis=1, keepdims=True)
    # mxfp4: the top gap (2^f .. 1.5 * 2^f) and the clip at 1.5 * 2^f (f = floor(log2 max|block|)) are both within
    # max / 4; the i-quants: half the widest gap (24 of 127) or the clip to 113 on the far side, plus the f16 and
    # 6-bit scale rounding, measured 0.12 on these normal weights
    # q5_0: half a step of max / 16, or on the far side the clip to 15 steps (one step); q5_1: half a step of
    # (max - min) / 31; plus the f16 rounding of d and m
    bound = {"mxfp4": 0.25, "iq4_xs": 0.15, "iq4_nl": 0.15, "q5_0": 0.07, "q5_1": 0.04}[scheme]
    assert (np.abs(back - w).reshape(-1, 32) <= bound * runs).all()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_cols_not_whole_blocks_are_refused(rt, scheme):
    g = BY_NAME[scheme].group
    with pytest.raises(ColibriError, match=f"{scheme} needs cols a multiple of {g}"):
        pack_matrix(np.zeros((2, g + 8), np.float32), scheme)
    raw = random_blocks(np.random.default_rng(1), scheme, 2, 256)
    blob, layout = packed(raw, scheme, 2, 256)
    bad = MatrixLayout(**{**layout.__dict__, "cols": 255})
    with pytest.raises((ColibriError, ValueError), match=f"{scheme} needs cols a multiple of {g}"):
        rt.matmul(np.zeros((1, 255), np.float32), matrix_view(blob, bad))
