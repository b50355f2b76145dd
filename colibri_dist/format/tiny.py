"""Deterministic tiny Hugging Face MoE checkpoints for tests and demos (needs torch + transformers).

Role in the data flow: the source end of the live oracle. `write_tiny(family, dir)`
builds a seeded transformers model of the family, saves it as safetensors
(hub per-expert layout through save_pretrained, or the fused layout of the
transformers >= 5 modules straight from state_dict), and returns the model so
tests compare colibri against `model.model.layers[L].mlp` itself.
torch and transformers are imported lazily: the runtime never needs them.
"""
import os

FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3")
_COMMON = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.2,
               tie_word_embeddings=False)


def tiny_config(family):
    import transformers
    if family == "mixtral":
        return transformers.MixtralConfig(**_COMMON, intermediate_size=16, num_local_experts=8,
                                          num_experts_per_tok=2)
    if family == "qwen2_moe":
        return transformers.Qwen2MoeConfig(**_COMMON, intermediate_size=48, moe_intermediate_size=16,
                                           shared_expert_intermediate_size=24, num_experts=8,
                                           num_experts_per_tok=2, norm_topk_prob=False)
    if family == "qwen3_moe":
        return transformers.Qwen3MoeConfig(**_COMMON, intermediate_size=48, moe_intermediate_size=16,
                                           num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                                           head_dim=8)
    if family == "olmoe":
        return transformers.OlmoeConfig(**_COMMON, intermediate_size=16, num_experts=8, eos_token_id=1,
                                        num_experts_per_tok=2)
    if family == "deepseek_v3":
        common = dict(_COMMON, num_key_value_heads=4)
        return transformers.DeepseekV3Config(**common, intermediate_size=48, moe_intermediate_size=16,
                                             n_routed_experts=8, num_experts_per_tok=2, n_group=4,
                                             topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
                                             q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8,
                                             qk_nope_head_dim=8, v_head_dim=8, routed_scaling_factor=2.5)
    raise ValueError(f"unknown tiny family {family!r}; choose from {', '.join(FAMILIES)}")


def tiny_model(family, seed=0):
    """A float32 eval-mode transformers model with seeded weights (non-zero DeepSeek biases)."""
    import torch
    import transformers
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(family)).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            bias = getattr(module, "e_score_correction_bias", None)
            if bias is not None:
                bias.copy_((torch.rand(bias.shape, generator=gen) - 0.5) * 0.1)
    return model


def write_tiny(family, out_dir, seed=0, layout="hub", dtype="float32", max_shard_size=None):
    """Save a tiny checkpoint; returns the float32 model holding exactly the saved weights.

    layout: "hub" (per-expert tensors, save_pretrained) or "fused" (experts.gate_up_proj /
    experts.down_proj as the transformers modules hold them). dtype: float32|bfloat16|float16.
    max_shard_size: e.g. "20KB" for a sharded checkpoint with model.safetensors.index.json.
    """
    import torch
    model = tiny_model(family, seed)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    model = model.to(torch_dtype)
    os.makedirs(out_dir, exist_ok=True)
    if layout == "hub":
        kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
        model.save_pretrained(out_dir, **kwargs)
    elif layout == "fused":
        _save_fused(model, out_dir)
    else:
        raise ValueError(f"layout must be 'hub' or 'fused', not {layout!r}")
    return model.float()


def _save_fused(model, out_dir):
    from safetensors.torch import save_file
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(out_dir)
