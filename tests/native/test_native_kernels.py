"""Expert FFN on every weight scheme vs the numpy reference, on every SIMD level; each level == scalar bit for bit."""
import numpy as np
import pytest

from colibri_dist.format.quantize import dequantize, pack_expert
from colibri_dist.native import Runtime, simd_force, simd_name
from colibri_dist.native import expert_view
from native_helpers import AVAILABLE_LEVELS, simd_params, SCHEMES, decoded, ffn_ref, rand_expert, view_of

PATHS = simd_params()


@pytest.fixture(scope="module")
def rt():
    with Runtime(threads=2) as r:
        yield r


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("hidden,inter", [(64, 48), (75, 37), (200, 131)])
def test_expert_forward_matches_decoded_reference(rt, path, scheme, hidden, inter):
    rng = np.random.default_rng(hidden * 1000 + inter)
    view = view_of(rand_expert(rng, hidden, inter), scheme)
    x = rng.standard_normal((11, hidden)).astype(np.float32)
    with simd_force(path):
        assert simd_name() == path
        out = rt.expert_forward(x, view)
    ref = ffn_ref(x, *decoded(view))
    assert np.abs(out - ref).max() <= 2e-5 * np.abs(ref).max()


@pytest.mark.parametrize("path", [p for p in PATHS if p.values[0] != "scalar"])
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 9, 17])
def test_every_simd_level_is_bit_identical_to_scalar(rt, path, scheme, n):
    rng = np.random.default_rng(7 + n)
    view = view_of(rand_expert(rng, 131, 70), scheme)      # 131, 70: odd K tails and short last groups
    x = rng.standard_normal((n, 131)).astype(np.float32)
    with simd_force(path):
        a = rt.expert_forward(x, view)
    with simd_force("scalar"):
        b = rt.expert_forward(x, view)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_quantizer_roundtrip_error_bounds(scheme):
    rng = np.random.default_rng(3)
    g, u, d = rand_expert(rng, 100, 60)
    blob, layout = pack_expert(g, u, d, scheme)
    back = dequantize(blob, layout.down)
    err = np.abs(back - d).max() / np.abs(d).max()
    bound = {"f32": 0, "f16": 1e-3, "bf16": 8e-3}.get(scheme, 1 / 127 * 0.51 * 2)
    if scheme.startswith("int4"):              # least-squares steps may clip a group's largest weights
        bound = 2 / 9
        rms = np.sqrt(((back - d) ** 2).mean() / (d ** 2).mean())
        assert rms <= 0.11, rms
    if scheme == "int6-g64":                   # amax / 31 per group: half a step at most
        bound = 1 / 31 * 0.51
    assert err <= bound
    assert layout.nbytes % 64 == 0 and layout.gate.data_offset % 64 == 0 and layout.down.data_offset % 64 == 0


def test_group_scales_cover_short_last_group():
    rng = np.random.default_rng(4)
    g, u, d = rand_expert(rng, 70, 33)      # 70 = 64 + 6 for g64, 33 = 32 + 1
    blob, layout = pack_expert(g, u, d, "int8-g64")
    assert layout.gate.scale_count == 33 * 2 and layout.down.scale_count == 70 * 1
    # the short group gets its own scale: its max element decodes to +-127 * scale
    q = blob[layout.gate.data_offset:layout.gate.data_offset + 33 * 70].view(np.int8).reshape(33, 70)
    assert np.abs(q[:, 64:]).max(axis=1).min() == 127


def test_bf16_rounds_to_nearest_even():
    from colibri_dist.format.quantize import bf16_bits_to_f32, f32_to_bf16_bits
    vals = np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -(1.0 + 2 ** -8), 1.0 + 2 ** -8 + 2 ** -20], np.float32)
    got = bf16_bits_to_f32(f32_to_bf16_bits(vals))
    assert got.tolist() == [1.0, 1.0 + 2 ** -6, -1.0, 1.0 + 2 ** -7]


def test_minmax_zero_point_and_scale_shapes():
    rng = np.random.default_rng(5)
    g, u, d = rand_expert(rng, 40, 20)
    g = g + 0.3                              # asymmetric range
    blob, layout = pack_expert(g, u, d, "int8-minmax")
    zero = blob[layout.gate.zero_offset:layout.gate.zero_offset + 4].view(np.int32)[0]
    assert layout.gate.scale_count == 1 and -128 <= zero <= 127 and zero != 0
    back = dequantize(blob, layout.gate)
    assert np.abs(back - g).max() <= 0.51 * blob[layout.gate.scale_offset:layout.gate.scale_offset + 4].view(np.float32)[0]


@pytest.mark.parametrize("scheme,g", [("int4-g32", 32), ("int4-g64", 64)])
def test_int4_packing_order_and_odd_rows(rt, scheme, g):
    """colibri.h: element c in byte c // 2, low nibble for even c; odd rows end in a zero high nibble."""
    inter, hidden = 3, 2 * g + 3                      # a short last group and an odd row length
    gate = np.zeros((inter, hidden), np.float32)
    gate[0, :4] = [7, -7, 1, -3]                     # group amax 7: scale 1, codes exact
    gate[1, hidden - 1] = -3.5
    gate[2] = np.linspace(-1, 1, hidden)
    blob, layout = pack_expert(gate, gate, gate.T.copy(), scheme)
    m = layout.gate
    assert m.data_bytes == inter * (hidden + 1) // 2 and m.scale_count == inter * (-(-hidden // g))
    raw = blob[m.data_offset:m.data_offset + m.data_bytes].reshape(inter, -1)
    assert raw[0, 0] == (7 | ((-7 & 15) << 4)) and raw[0, 1] == (1 | ((-3 & 15) << 4))
    assert raw[1, -1] == (-7 & 15)                   # element hidden-1 (even) in the low nibble, high nibble 0
    assert np.allclose(dequantize(blob, m)[0, :4], [7, -7, 1, -3], atol=1e-6)
    view = expert_view(blob, layout)
    x = np.random.default_rng(5).standard_normal((5, hidden)).astype(np.float32)
    ref = ffn_ref(x, *decoded(view))
    out = rt.expert_forward(x, view)
    assert np.abs(out - ref).max() <= 2e-5 * np.abs(ref).max()
