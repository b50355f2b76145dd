"""Tiny whole-model checkpoints for the oracle tests: every family, sizes that are not round.

Odd hidden sizes and vocabularies, GQA ratios 1, 3 and 4, explicit head_dim, q/k/v biases,
QK-norm per head and over the projection with clip_qkv, a sliding window shorter than the
prompt (all layers for Mixtral, per layer_types for Qwen2-MoE), dense MLP layers
(mlp_only_layers, first_k_dense_replace), DeepSeek MLA with and without q_lora_rank under yarn.
"""
import os

COMMON = dict(vocab_size=97, num_hidden_layers=3, max_position_embeddings=128, initializer_range=0.15,
              tie_word_embeddings=False, rms_norm_eps=1e-6)

CASES = {
    "mixtral": ("MixtralConfig", dict(hidden_size=36, num_attention_heads=6, num_key_value_heads=2, head_dim=10,
                                      intermediate_size=20, num_local_experts=4, num_experts_per_tok=2,
                                      sliding_window=16)),
    "qwen2_moe": ("Qwen2MoeConfig", dict(hidden_size=40, num_attention_heads=5, num_key_value_heads=5,
                                         intermediate_size=28, moe_intermediate_size=12,
                                         shared_expert_intermediate_size=20, num_experts=6, num_experts_per_tok=2,
                                         norm_topk_prob=False, mlp_only_layers=[1], use_sliding_window=True,
                                         sliding_window=12, max_window_layers=2)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(hidden_size=48, num_attention_heads=8, num_key_value_heads=2, head_dim=12,
                                         intermediate_size=24, moe_intermediate_size=14, num_experts=8,
                                         num_experts_per_tok=3, norm_topk_prob=True)),
    "olmoe": ("OlmoeConfig", dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=4,
                                  intermediate_size=18, num_experts=8, num_experts_per_tok=2, clip_qkv=1.5,
                                  tie_word_embeddings=True)),
    "deepseek_v3": ("DeepseekV3Config", dict(hidden_size=40, num_attention_heads=4, num_key_value_heads=4,
                                             intermediate_size=36, moe_intermediate_size=12, n_routed_experts=8,
                                             num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1,
                                             first_k_dense_replace=1, q_lora_rank=24, kv_lora_rank=20,
                                             qk_rope_head_dim=6, qk_nope_head_dim=8, v_head_dim=10,
                                             routed_scaling_factor=2.5, rope_interleave=True,
                                             rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                                              "factor": 4.0, "original_max_position_embeddings": 32,
                                                              "mscale": 1.0, "mscale_all_dim": 1.0,
                                                              "beta_fast": 32, "beta_slow": 1})),
    "deepseek_v3_plain_q": ("DeepseekV3Config", dict(hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
                                                     intermediate_size=24, moe_intermediate_size=8,
                                                     n_routed_experts=4, num_experts_per_tok=2, n_group=1,
                                                     topk_group=1, n_shared_experts=1, first_k_dense_replace=0,
                                                     q_lora_rank=None, kv_lora_rank=12, qk_rope_head_dim=4,
                                                     qk_nope_head_dim=6, v_head_dim=6, rope_interleave=False)),
}


def make_model(case, seed=0):
    import torch
    import transformers
    cls_name, kw = CASES[case]
    cfg = getattr(transformers, cls_name)(**dict(COMMON, **kw))
    torch.manual_seed(seed)
    # eager attention and experts: the reference written as plain loops (grouped_mm wants 16-byte strides)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                          experts_implementation="eager").eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:     # non-trivial norms
                p.copy_(1.0 + 0.2 * (torch.rand(p.shape, generator=gen) - 0.5))
            elif name.endswith(".bias"):
                p.copy_(0.1 * (torch.rand(p.shape, generator=gen) - 0.5))
        for module in model.modules():
            bias = getattr(module, "e_score_correction_bias", None)
            if bias is not None:
                bias.copy_((torch.rand(bias.shape, generator=gen) - 0.5) * 0.1)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def write_case(case, out_dir, seed=0):
    model = make_model(case, seed)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    return model
