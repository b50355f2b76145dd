"""Tiny random MoE checkpoints written with numpy + safetensors and converted to .colibri.

No torch: the engine tests need real containers (real reader, real packing,
real kernels) but not the transformers oracle (tests/format covers that).
"""
import json
import os

import numpy as np
from safetensors.numpy import save_file

HIDDEN, INTER, N_EXPERTS, TOP_K, N_LAYERS = 32, 16, 8, 2, 2

CONFIGS = {
    "mixtral": dict(model_type="mixtral", intermediate_size=INTER, num_local_experts=N_EXPERTS),
    "qwen2_moe": dict(model_type="qwen2_moe", moe_intermediate_size=INTER, num_experts=N_EXPERTS,
                      shared_expert_intermediate_size=24, norm_topk_prob=False),
    "deepseek_v3": dict(model_type="deepseek_v3", moe_intermediate_size=INTER, n_routed_experts=N_EXPERTS,
                        n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=0,
                        routed_scaling_factor=2.5, norm_topk_prob=True),
}


def _w(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def write_checkpoint(family, out_dir, seed=0):
    rng = np.random.default_rng(seed)
    os.makedirs(out_dir, exist_ok=True)
    cfg = dict(CONFIGS[family], hidden_size=HIDDEN, num_hidden_layers=N_LAYERS, num_experts_per_tok=TOP_K,
               vocab_size=16)
    tensors = {"model.embed_tokens.weight": _w(rng, 16, HIDDEN, scale=1.0)}
    for layer in range(N_LAYERS):
        if family == "mixtral":
            p = f"model.layers.{layer}.block_sparse_moe"
            parts = ("w1", "w3", "w2")
        else:
            p = f"model.layers.{layer}.mlp"
            parts = ("gate_proj", "up_proj", "down_proj")
        tensors[f"{p}.gate.weight"] = _w(rng, N_EXPERTS, HIDDEN)
        for e in range(N_EXPERTS):
            tensors[f"{p}.experts.{e}.{parts[0]}.weight"] = _w(rng, INTER, HIDDEN)
            tensors[f"{p}.experts.{e}.{parts[1]}.weight"] = _w(rng, INTER, HIDDEN)
            tensors[f"{p}.experts.{e}.{parts[2]}.weight"] = _w(rng, HIDDEN, INTER)
        if family == "qwen2_moe":
            s = cfg["shared_expert_intermediate_size"]
            tensors[f"{p}.shared_expert.gate_proj.weight"] = _w(rng, s, HIDDEN)
            tensors[f"{p}.shared_expert.up_proj.weight"] = _w(rng, s, HIDDEN)
            tensors[f"{p}.shared_expert.down_proj.weight"] = _w(rng, HIDDEN, s)
            tensors[f"{p}.shared_expert_gate.weight"] = _w(rng, 1, HIDDEN)
        if family == "deepseek_v3":
            tensors[f"{p}.gate.e_score_correction_bias"] = _w(rng, N_EXPERTS, scale=0.05)
            tensors[f"{p}.shared_experts.gate_proj.weight"] = _w(rng, INTER, HIDDEN)
            tensors[f"{p}.shared_experts.up_proj.weight"] = _w(rng, INTER, HIDDEN)
            tensors[f"{p}.shared_experts.down_proj.weight"] = _w(rng, HIDDEN, INTER)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    return out_dir


def make_model(family, root, scheme="int8", seed=0):
    from colibri_dist.format.convert import convert
    src = write_checkpoint(family, os.path.join(root, f"{family}-src"), seed)
    dst = os.path.join(root, f"{family}-{scheme}.colibri")
    convert(src, dst, experts=scheme, progress=False)
    return dst


def expert_weights(seed, hidden=HIDDEN, inter=INTER):
    rng = np.random.default_rng(seed)
    return {"gate": _w(rng, inter, hidden), "up": _w(rng, inter, hidden), "down": _w(rng, hidden, inter)}


def tokens(n, seed=1, hidden=HIDDEN):
    return np.random.default_rng(seed).standard_normal((n, hidden)).astype(np.float32)
