"""The real layer shapes `colibri bench scale` builds: Qwen3-30B-A3B and DeepSeek-V3, as config.json + tensor lists.

Role: one row per shape (SHAPES). config(shape, layers) is the Hugging Face config.json of the published
model cut to `layers` decoder layers (every one an MoE layer; DeepSeek-V3's three leading dense layers are
left out so each layer built carries the 256 routed experts), and the same two at toy widths for smoke runs
and tests; tensors(cfg) lists (name, shape, kind) in the
hub's per-expert layout, in file order: embedding, then per layer attention, norms, router and experts,
then the final norm and the untied head. kind says how checkpoint.py fills it (weights, norm, router, bias).
"""

QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False, "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": False,
    "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645,
    "sliding_window": None, "use_sliding_window": False, "initializer_range": 0.02,
}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5,
    "norm_topk_prob": True, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "first_k_dense_replace": 0,
    "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
    "max_position_embeddings": 163840, "rope_theta": 10000.0, "rms_norm_eps": 1e-06,
    "rope_scaling": {"type": "yarn", "rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                     "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1},
    "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu", "torch_dtype": "bfloat16",
    "bos_token_id": 0, "eos_token_id": 1, "initializer_range": 0.02,
}
# the same families at toy widths: the bench's own tests and a minute-long smoke run of every step
QWEN3_TINY = dict(QWEN3_30B_A3B, hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_experts=32,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=2048,
                  max_position_embeddings=4096)
DEEPSEEK_TINY = dict(DEEPSEEK_V3, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                     n_routed_experts=32, n_group=4, topk_group=2, num_attention_heads=4, num_key_value_heads=4,
                     q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
                     vocab_size=2048, max_position_embeddings=4096)
# the real layer with 16 of its 128 experts: a token's work is the same (top 8 of the same experts, the same
# attention and head), the file 1/8 of the experts' bytes: all 48 layers fit a small disk (Python's share at depth)
QWEN3_16E = dict(QWEN3_30B_A3B, num_experts=16)
SHAPES = {"qwen3-30b-a3b": (QWEN3_30B_A3B, 8), "deepseek-v3": (DEEPSEEK_V3, 1),   # shape: (config, default layers)
          "qwen3-30b-a3b-16e": (QWEN3_16E, 48),
          "qwen3-tiny": (QWEN3_TINY, 2), "deepseek-v3-tiny": (DEEPSEEK_TINY, 2)}


def config(shape, layers):
    """config.json of `shape` with `layers` decoder layers."""
    if shape not in SHAPES:
        raise ValueError(f"--shape: unknown {shape!r}; choose from {', '.join(SHAPES)}")
    if layers < 1:
        raise ValueError(f"--layers: must be >= 1, got {layers}")
    return dict(SHAPES[shape][0], num_hidden_layers=int(layers))


def n_experts(cfg):
    return cfg.get("num_experts") or cfg["n_routed_experts"]


def _attention(cfg, p):
    h, H = cfg["hidden_size"], cfg["num_attention_heads"]
    if cfg["model_type"] == "deepseek_v3":
        qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
        lat = cfg["kv_lora_rank"]
        return [(f"{p}.q_a_proj.weight", (cfg["q_lora_rank"], h), "w"),
                (f"{p}.q_a_layernorm.weight", (cfg["q_lora_rank"],), "norm"),
                (f"{p}.q_b_proj.weight", (H * qk, cfg["q_lora_rank"]), "w"),
                (f"{p}.kv_a_proj_with_mqa.weight", (lat + cfg["qk_rope_head_dim"], h), "w"),
                (f"{p}.kv_a_layernorm.weight", (lat,), "norm"),
                (f"{p}.kv_b_proj.weight", (H * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), lat), "w"),
                (f"{p}.o_proj.weight", (h, H * cfg["v_head_dim"]), "o")]
    hd, kv = cfg["head_dim"], cfg["num_key_value_heads"]
    return [(f"{p}.q_proj.weight", (H * hd, h), "w"), (f"{p}.k_proj.weight", (kv * hd, h), "w"),
            (f"{p}.v_proj.weight", (kv * hd, h), "w"), (f"{p}.o_proj.weight", (h, H * hd), "o"),
            (f"{p}.q_norm.weight", (hd,), "norm"), (f"{p}.k_norm.weight", (hd,), "norm")]


def _mlp(p, h, inter):
    return [(f"{p}.gate_proj.weight", (inter, h), "w"), (f"{p}.up_proj.weight", (inter, h), "w"),
            (f"{p}.down_proj.weight", (h, inter), "w")]


def layer_tensors(cfg, i):
    h, inter, E = cfg["hidden_size"], cfg["moe_intermediate_size"], n_experts(cfg)
    p = f"model.layers.{i}"
    out = [(f"{p}.input_layernorm.weight", (h,), "norm"), (f"{p}.post_attention_layernorm.weight", (h,), "norm")]
    out += _attention(cfg, f"{p}.self_attn")
    out.append((f"{p}.mlp.gate.weight", (E, h), "router"))
    if cfg["model_type"] == "deepseek_v3":
        out.append((f"{p}.mlp.gate.e_score_correction_bias", (E,), "bias"))
        out += _mlp(f"{p}.mlp.shared_experts", h, inter * cfg["n_shared_experts"])
    for e in range(E):
        out += _mlp(f"{p}.mlp.experts.{e}", h, inter)
    return out


def tensors(cfg):
    """[(name, shape, kind)] of the whole checkpoint in file order."""
    h, V = cfg["hidden_size"], cfg["vocab_size"]
    out = [("model.embed_tokens.weight", (V, h), "embed")]
    for i in range(cfg["num_hidden_layers"]):
        out += layer_tensors(cfg, i)
    return out + [("model.norm.weight", (h,), "norm"), ("lm_head.weight", (V, h), "w")]


def nbytes(cfg):
    """Bytes of the bf16 checkpoint (the correction bias is f32)."""
    total = 0
    for _, shape, kind in tensors(cfg):
        n = 1
        for d in shape:
            n *= d
        total += n * (4 if kind == "bias" else 2)
    return total


def kv_bytes_per_token(cfg):
    """f32 KV cache bytes one token holds over all layers (GQA: K and V per KV head; MLA: the latent row)."""
    if cfg["model_type"] == "deepseek_v3":
        row = cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
    else:
        row = 2 * cfg["num_key_value_heads"] * cfg["head_dim"]
    return cfg["num_hidden_layers"] * row * 4
