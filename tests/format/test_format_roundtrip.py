"""Converted tiny checkpoints hold exactly the transformers weights, in every source layout."""
import os

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.format.tiny import FAMILIES


def _matrix(blob, m):
    return blob[m.data_offset:m.data_offset + m.data_bytes].view(np.float32).reshape(m.rows, m.cols)


def _expected_experts(mlp, e, inter):
    """Expert e of a transformers MoE block as colibri stores it: (gate, up, down), biases or None."""
    gate_up = mlp.experts.gate_up_proj.detach().numpy()[e]
    down = mlp.experts.down_proj.detach().numpy()[e]
    if not hasattr(mlp.experts, "gate_up_proj_bias"):            # [2I, H] gate rows first, down [H, I]
        return (gate_up[:inter], gate_up[inter:], down), None
    b = mlp.experts.gate_up_proj_bias.detach().numpy()[e]          # gpt-oss: x @ W, gate/up interleaved
    return (gate_up[:, 0::2].T, gate_up[:, 1::2].T, down.T), (b[0::2], b[1::2],
                                                              mlp.experts.down_proj_bias.detach().numpy()[e])


def _check_layer(model, hf, layer):
    from colibri_dist.format.quantize import expert_biases
    mlp = hf.model.layers[layer].mlp
    for e in range(model.config.n_experts):
        blob, layout = model.read_expert(layer, e), model.expert_layout(layer, e)
        mats, biases = _expected_experts(mlp, e, model.config.inter)
        for part, want in zip(("gate", "up", "down"), mats):
            assert np.array_equal(_matrix(blob, getattr(layout, part)), want)
        got = expert_biases(blob, layout)
        assert (got is None) == (biases is None)
        assert biases is None or all(np.array_equal(g, w) and np.any(w != 0) for g, w in zip(got, biases))
    router = getattr(mlp, "gate", None) or mlp.router
    assert np.array_equal(model.router(layer), router.weight.detach().numpy())
    if getattr(router, "bias", None) is not None:                   # gpt-oss's router bias
        assert np.array_equal(model.correction_bias(layer), router.bias.detach().numpy())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layout", ["hub", "fused"])
def test_experts_and_router_match_transformers(converted, family, layout):
    path, hf = converted(family, "f32", layout)
    with cd.open_model(path) as model:
        assert model.config.family == family
        for layer in model.moe_layers:
            _check_layer(model, hf, layer)
        model.verify(progress=False)


def test_deepseek_dense_first_layer_bias_and_shared(converted):
    path, hf = converted("deepseek_v3", "f32")
    with cd.open_model(path) as model:
        assert model.moe_layers == [1] and model.config.n_layers == 2
        mlp = hf.model.layers[1].mlp
        bias = model.correction_bias(1)
        assert np.array_equal(bias, mlp.gate.e_score_correction_bias.numpy()) and np.any(bias != 0)
        blob, layout = model.shared_expert(1)
        assert np.array_equal(_matrix(blob, layout.down), mlp.shared_experts.down_proj.weight.detach().numpy())
        g = model.config.gating
        assert (g.kind, g.n_group, g.topk_group, g.routed_scaling_factor) == ("sigmoid_group", 4, 2, 2.5)
        # the dense layer-0 MLP is one dense-MLP blob in the dense scheme (f32 here: exact)
        blob, layout = model.dense_mlp(0)
        for part in ("gate", "up", "down"):
            assert np.array_equal(_matrix(blob, getattr(layout, part)),
                                  getattr(hf.model.layers[0].mlp, f"{part}_proj").weight.detach().numpy())
        assert model.dense_mlp(1) is None
        # attention projections are encoded matrices; tensor() decodes them
        assert np.array_equal(model.tensor("model.layers.0.self_attn.kv_b_proj.weight"),
                              hf.model.layers[0].self_attn.kv_b_proj.weight.detach().numpy())


def test_qwen2_shared_gate_and_gating_kind(converted):
    path, hf = converted("qwen2_moe", "f32")
    with cd.open_model(path) as model:
        mlp = hf.model.layers[0].mlp
        assert np.array_equal(model.shared_gate(0), mlp.shared_expert_gate.weight.detach().numpy()[0])
        assert model.config.shared_inter == 24 and model.config.shared_gate
        assert model.config.gating.kind == "softmax_topk"


def test_sharded_checkpoint_with_index(converted, tiny_dir):
    src, _ = tiny_dir("mixtral", "hub", "float32", "20KB")
    assert os.path.exists(src / "model.safetensors.index.json")
    path, hf = converted("mixtral", "f32", shards="20KB")
    with cd.open_model(path) as model:
        _check_layer(model, hf, 1)
        assert np.array_equal(model.tensor("lm_head.weight"), hf.lm_head.weight.detach().numpy())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_sources_widen_exactly(converted, dtype):
    path, hf = converted("olmoe", "f32", "hub", dtype)
    with cd.open_model(path) as model:
        _check_layer(model, hf, 0)          # hf holds the rounded weights, widened to f32
        assert model.tensor("model.norm.weight").dtype == (np.uint16 if dtype == "bfloat16" else np.float16)


def test_blobs_are_4096_aligned_and_read_in_one_call(converted, monkeypatch):
    path, _ = converted("mixtral", "f32")
    calls = []
    real = os.preadv

    def counting(fd, buffers, offset):
        calls.append((offset, sum(len(memoryview(b).cast("B")) for b in buffers)))
        return real(fd, buffers, offset)
    with cd.open_model(path) as model:
        monkeypatch.setattr(os, "preadv", counting)
        for e in range(model.config.n_experts):
            offset, nbytes, _ = model.expert_location(1, e)
            assert offset % 4096 == 0
            blob = model.read_expert(1, e)
            assert blob.ctypes.data % 64 == 0
            assert np.array_equal(blob, model.expert_blob(1, e))
        assert calls == [model.expert_location(1, e)[:2] for e in range(model.config.n_experts)]


def test_expert_blob_is_a_zero_copy_view(converted):
    path, _ = converted("mixtral", "f32")
    with cd.open_model(path) as model:
        view = model.expert_blob(0, 0)
        assert not view.flags.owndata and not view.flags.writeable


def test_unknown_layer_or_expert_is_invalid_argument(converted):
    path, _ = converted("deepseek_v3", "f32")
    with cd.open_model(path) as model:
        with pytest.raises(cd.InvalidArgument, match="layer 0 is not a MoE layer"):
            model.expert_blob(0, 0)
        with pytest.raises(cd.InvalidArgument, match="no expert 8"):
            model.read_expert(1, 8)
