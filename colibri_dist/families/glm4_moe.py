"""GLM-4.5 MoE (Glm4MoeForCausalLM): DeepSeek-V3-style sigmoid group-limited routing with a correction
bias, n_shared_experts shared MLP, first_k_dense_replace dense layers; GQA with q/k/v biases
(attention_bias; o_proj never biased), optional per-head QK RMSNorm (use_qk_norm) and partial rotary
(rope_parameters.partial_rotary_factor, 0.5 by default: rotate-half on the first half of each head).
The hub checkpoints' multi-token-prediction layer (model.layers.{num_hidden_layers}.*) is not converted.

Role: the family table entry (format/families.py, model/arch.py, model/weights.py, format/tiny.py read
it) and its tiny test configs. Added through the family seam (issue 22 item 2): no other file names it.
"""
from ._base import Attention, Family, Names
from ._gguf import (CORRECTION_BIAS, DENSE_MLP, GROUPED_SIGMOID_MOE, HEAD_DIM, QK_NORM, QKV_BIAS, REQUIRED, SHARED_EXPERTS, GgufArch,
                    config_rows)
from ._rules import grouped_sigmoid_moe

DEFAULTS = dict(experts=128, top_k=8, inter=1408, n_group=1, topk_group=1, scaling=1.0, first_dense=1)


def moe(hf):
    return grouped_sigmoid_moe(hf, DEFAULTS)


def attention(hf, n_layers, where):
    return Attention(qkv_bias=bool(hf.get("attention_bias", False)), o_bias=False,
                     qk_norm="head" if hf.get("use_qk_norm") else "none")


FAMILY = Family(
    "glm4_moe", moe, attention,
    # convert_hf_to_gguf.py Glm4MoeModel: block_count counts the NextN layer(s); sigmoid gating (func 2)
    gguf=GgufArch("glm4moe", "Glm4MoeForCausalLM", extra_layers="nextn_predict_layers", partial_rotary=True,
                  checks={"expert_gating_func": (2,)},
                  flags={"attention_bias": "attn_q.bias", "use_qk_norm": "attn_q_norm.weight"},
                  layer_tensors=dict(QK_NORM, **QKV_BIAS, **DENSE_MLP, **SHARED_EXPERTS, **CORRECTION_BIAS,
                                     **{"post_attention_norm.weight": "post_attention_layernorm.weight"}),
                  config=config_rows(rename={"expert_count": "n_routed_experts"}, add=HEAD_DIM + (
                      ("feed_forward_length", "intermediate_size", REQUIRED),
                  ) + GROUPED_SIGMOID_MOE)),
    names=Names(shared="shared_experts", correction_bias="gate.e_score_correction_bias"),
    values={"use_qk_norm": "bool?"},
    drop_extra_layers=True,    # the checkpoints' model.layers.{num_hidden_layers} MTP module
    tiny=("Glm4MoeConfig", dict(intermediate_size=48, moe_intermediate_size=16, n_routed_experts=8,
                                num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
                                first_k_dense_replace=1, routed_scaling_factor=1.5)),
    # odd sizes; head_dim 12 with partial_rotary_factor 0.5 rotates 6 of 12; GQA 3; biases; QK-norm;
    # 2 layers (one dense, one MoE) to keep the oracle tests short
    cases={"glm4_moe": ("Glm4MoeConfig", dict(num_hidden_layers=2, hidden_size=44, num_attention_heads=6, num_key_value_heads=2,
                                              head_dim=12, intermediate_size=30, moe_intermediate_size=10,
                                              n_routed_experts=8, num_experts_per_tok=3, n_group=2, topk_group=1,
                                              n_shared_experts=2, first_k_dense_replace=1, attention_bias=True,
                                              use_qk_norm=True, norm_topk_prob=True, routed_scaling_factor=1.8))},
)
