"""THE LIVE ORACLE: converted tiny checkpoints reproduce the transformers MoE blocks.

For each family (and both source layouts), the colibri MoeExecutor's moe_forward on
one MoE layer is compared with `model.model.layers[L].mlp` itself on random
hidden states. f32 experts: max abs error <= 2e-5 * max|ref|; bf16/f16 within
their rounding; int8 schemes: cosine >= 0.999; int4 per group: cosine >= 0.98.
"""
import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.format.tiny import FAMILIES

torch = pytest.importorskip("torch")


def reference(hf, layer, x):
    with torch.no_grad():
        y = hf.model.layers[layer].mlp(torch.from_numpy(x)[None])
    y = y[0] if isinstance(y, tuple) else y          # gpt-oss's block also returns its router scores
    return y[0].numpy()


def colibri(path, layer, x):
    with cd.MoeExecutor(path) as eng:
        return eng.moe_forward(layer, x)


def hidden_states(n, hidden, seed=7):
    return np.random.default_rng(seed).standard_normal((n, hidden)).astype(np.float32)


def cosine(a, b):
    return float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layout", ["hub", "fused"])
def test_f32_matches_transformers_block(converted, family, layout):
    path, hf = converted(family, "f32", layout)
    model = cd.open_model(path)
    layer = model.moe_layers[-1]
    x = hidden_states(48, model.config.hidden)
    model.close()
    ref, got = reference(hf, layer, x), colibri(path, layer, x)
    assert got.shape == ref.shape and got.dtype == np.float32
    assert np.max(np.abs(got - ref)) <= 2e-5 * np.max(np.abs(ref))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme,bound", [("bf16", 1e-2), ("f16", 2e-3)])
def test_half_precision_experts_close_to_transformers(converted, family, scheme, bound):
    path, hf = converted(family, scheme)
    layer = cd.open_model(path).moe_layers[-1]
    x = hidden_states(48, 32, seed=11)
    ref, got = reference(hf, layer, x), colibri(path, layer, x)
    assert np.max(np.abs(got - ref)) <= bound * np.max(np.abs(ref))
    assert cosine(got, ref) >= 0.9999


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", ["int8", "int8-g32", "int8-minmax"])
def test_int8_experts_cosine(converted, family, scheme):
    path, hf = converted(family, scheme)
    layer = cd.open_model(path).moe_layers[-1]
    x = hidden_states(48, 32, seed=13)
    ref, got = reference(hf, layer, x), colibri(path, layer, x)
    assert cosine(got, ref) >= 0.999


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", ["int4-g32", "int4-g64"])
def test_int4_experts_cosine_and_c_reader(converted, family, scheme):
    from colibri_dist._native import ffi, lib
    path, hf = converted(family, scheme)
    model = cd.open_model(path)
    layer, hidden = model.moe_layers[-1], model.config.hidden
    assert model.config.scheme == scheme and model.expert_layout(layer).gate.dtype == cd_scheme_code(scheme)
    model.close()
    x = hidden_states(48, hidden, seed=13)
    ref, got = reference(hf, layer, x), colibri(path, layer, x)
    assert cosine(got, ref) >= 0.98                       # measured table: docs/KERNELS.md
    out = ffi.new("cb_model **")                          # the C reader accepts the int4 blobs
    assert lib.cb_model_open(str(path).encode(), 1, out) == lib.CB_OK, ffi.string(lib.cb_last_error())
    lib.cb_model_close(out[0])


def cd_scheme_code(scheme):
    from colibri_dist.format.layout import SCHEMES
    return SCHEMES[scheme]


def test_bf16_source_with_f32_experts_is_exact_to_the_rounded_model(converted):
    path, hf = converted("deepseek_v3", "f32", "hub", "bfloat16")   # hf: bf16 weights widened to f32
    x = hidden_states(32, 32, seed=17)
    ref, got = reference(hf, 1, x), colibri(path, 1, x)
    assert np.max(np.abs(got - ref)) <= 2e-5 * np.max(np.abs(ref))
