"""gpt-oss's experts through cb_expert_forward: biases and the clamped SwiGLU against transformers' GptOssExperts.

The oracle is transformers' own module (its gate_up_proj [E, hidden, 2*inter] with gate and up interleaved
column by column, its _apply_gate clamps): one expert packed as gate/up/down + three float32 biases +
Activation("swiglu_oai", alpha, limit) gives the module's output within 2e-5 of max|ref| in f32, with the
clamps active on a good share of the elements; every SIMD level gives the scalar level's bits; the w8a8 int8
path applies the same biases; a bad activation or bias shape is refused naming it.
"""
import numpy as np
import pytest

from colibri_dist import native
from colibri_dist.errors import InvalidArgument
from colibri_dist.format.layout import Activation
from colibri_dist.format.quantize import dequantize, expert_biases, pack_expert
from native_helpers import AVAILABLE_LEVELS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HIDDEN, INTER, EXPERTS, LIMIT, ALPHA = 36, 20, 3, 0.8, 1.5


def gpt_oss_experts(seed=0):
    cfg = transformers.GptOssConfig(hidden_size=HIDDEN, intermediate_size=INTER, num_local_experts=EXPERTS,
                                    swiglu_limit=LIMIT, swiglu_alpha=ALPHA)
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    mod = GptOssExperts(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return mod


def split(mod, e):
    """Expert e of the module as colibri's gate [inter, hidden], up, down [hidden, inter] and biases."""
    gu, b = mod.gate_up_proj[e].detach().numpy(), mod.gate_up_proj_bias[e].detach().numpy()
    gate, up = np.ascontiguousarray(gu[:, 0::2].T), np.ascontiguousarray(gu[:, 1::2].T)
    down = np.ascontiguousarray(mod.down_proj[e].detach().numpy().T)
    return (gate, up, down), (b[0::2], b[1::2], mod.down_proj_bias[e].detach().numpy())


def reference(mod, e, x):
    with torch.no_grad():
        xt = torch.from_numpy(x)
        h = mod._apply_gate(xt @ mod.gate_up_proj[e] + mod.gate_up_proj_bias[e])
        return (h @ mod.down_proj[e] + mod.down_proj_bias[e]).numpy()


def view(mod, e, scheme="f32"):
    mats, biases = split(mod, e)
    blob, layout = pack_expert(*mats, scheme, biases=biases, act=Activation("swiglu_oai", ALPHA, LIMIT))
    return native.expert_view(blob, layout)


def test_expert_matches_transformers_gpt_oss_experts():
    mod = gpt_oss_experts()
    x = np.random.default_rng(1).standard_normal((40, HIDDEN)).astype(np.float32)
    with native.Runtime(threads=2) as rt:
        for e in range(EXPERTS):
            ref, got = reference(mod, e, x), rt.expert_forward(x, view(mod, e))
            assert np.abs(got - ref).max() <= 2e-5 * np.abs(ref).max()
    with torch.no_grad():                      # the clamps bite: gate above the limit, up outside +-limit
        gu = torch.from_numpy(x) @ mod.gate_up_proj[0] + mod.gate_up_proj_bias[0]
        assert float((gu[:, 0::2] > LIMIT).float().mean()) > 0.2
        assert float((gu[:, 1::2].abs() > LIMIT).float().mean()) > 0.2


def test_biases_round_trip_through_the_blob():
    mod = gpt_oss_experts(seed=3)
    v = view(mod, 1)
    for got, want in zip(expert_biases(v.buffer, v.layout), split(mod, 1)[1]):
        assert np.array_equal(got, want)
    assert v.layout.act == Activation("swiglu_oai", ALPHA, LIMIT)


@pytest.mark.parametrize("level", AVAILABLE_LEVELS)
def test_every_simd_level_gives_the_scalar_bits(level):
    mod = gpt_oss_experts(seed=5)
    x = np.random.default_rng(2).standard_normal((33, HIDDEN)).astype(np.float32) * 3
    with native.Runtime(threads=3) as rt:
        with native.simd_force("scalar"):
            want = rt.expert_forward(x, view(mod, 2))
        with native.simd_force(level):
            got = rt.expert_forward(x, view(mod, 2))
    assert np.array_equal(got, want)


def test_w8a8_int8_expert_keeps_the_biases():
    # w8a8 quantizes the activations: compare with transformers on the int8-decoded weights, loosely
    mod = gpt_oss_experts(seed=7)
    v = view(mod, 0, "int8")
    g, u, d = (dequantize(v.buffer, getattr(v.layout, n)) for n in ("gate", "up", "down"))
    with torch.no_grad():
        gu = np.empty((HIDDEN, 2 * INTER), np.float32)
        gu[:, 0::2], gu[:, 1::2] = g.T, u.T
        mod.gate_up_proj[0].copy_(torch.from_numpy(gu))
        mod.down_proj[0].copy_(torch.from_numpy(np.ascontiguousarray(d.T)))
    x = np.random.default_rng(4).standard_normal((16, HIDDEN)).astype(np.float32)
    ref = reference(mod, 0, x)
    with native.Runtime(threads=1, w8a8=True) as rt:
        got = rt.expert_forward(x, v)
    with native.Runtime(threads=1, w8a8=False) as rt:
        exact = rt.expert_forward(x, v)
    assert np.abs(exact - ref).max() <= 2e-5 * np.abs(ref).max()
    assert np.abs(got - ref).max() <= 2e-2 * np.abs(ref).max()


@pytest.mark.parametrize("act,words", [(Activation("swiglu_oai", 1.0, 0.0), "limit > 0"),
                                       (Activation("swiglu_oai", float("nan"), 7.0), "finite alpha"),
                                       (Activation("gelu"), "'gelu' unknown")])
def test_bad_activation_is_refused(act, words):
    mod = gpt_oss_experts()
    mats, biases = split(mod, 0)
    blob, layout = pack_expert(*mats, "f32", biases=biases, act=act)
    with pytest.raises(InvalidArgument, match=words):
        native.expert_view(blob, layout)


def test_bad_bias_shape_is_refused():
    mod = gpt_oss_experts()
    mats, (bg, bu, bd) = split(mod, 0)
    with pytest.raises(InvalidArgument, match=r"down bias has shape \[35\], expected \[36\]"):
        pack_expert(*mats, "f32", biases=(bg, bu, bd[:-1]))
