"""DeepSeek-V3 (DeepseekV3ForCausalLM): sigmoid group-limited routing with a correction bias, shared
experts, first_k_dense_replace dense layers, multi-head latent attention (MLA) with yarn rope.

Role: the family table entry (format/families.py, model/arch.py, model/weights.py, format/tiny.py read
it) and its tiny test configs. model/arch.py reads the MLA dims (q_lora_rank, kv_lora_rank, ...).
"""
from ._base import Attention, Family, Names
from ._gguf import (CORRECTION_BIAS, DENSE_MLP, GROUPED_SIGMOID_MOE, MLA, REQUIRED, SHARED_EXPERTS, GgufArch,
                    config_rows)
from ._rules import grouped_sigmoid_moe

DEFAULTS = dict(experts=256, top_k=8, inter=2048, n_group=8, topk_group=4, scaling=2.5, first_dense=3)


def moe(hf):
    return grouped_sigmoid_moe(hf, DEFAULTS)


def attention(hf, n_layers, where):
    bias = bool(hf.get("attention_bias", False))
    return Attention(qkv_bias=bias, o_bias=bias, mla=True)


_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
         "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}
FAMILY = Family(
    "deepseek_v3", moe, attention,
    # convert_hf_to_gguf.py DeepseekV2Model: head_count_kv is 1 in newer files (MLA as MQA), so the KV heads are
    # the attention heads; the MLA dims come from rope.dimension_count and key/value_length(_mla) (gguf_source)
    gguf=GgufArch("deepseek2", "DeepseekV3ForCausalLM", mla=True, yarn=True, checks={"expert_gating_func": (2,)},
                  fixed={"rope_interleave": True},        # llama.cpp's deepseek2 rope: adjacent pairs
                  layer_tensors=dict(MLA, **DENSE_MLP, **SHARED_EXPERTS, **CORRECTION_BIAS),
                  config=config_rows("attention.head_count_kv", rename={"expert_count": "n_routed_experts"}, add=(
                      ("attention.head_count", "num_key_value_heads", REQUIRED),
                      ("feed_forward_length", "intermediate_size", REQUIRED),
                      ("attention.q_lora_rank", "q_lora_rank", None),
                      ("attention.kv_lora_rank", "kv_lora_rank", REQUIRED),
                      ("rope.dimension_count", "qk_rope_head_dim", REQUIRED),
                  ) + GROUPED_SIGMOID_MOE)),
    names=Names(shared="shared_experts", correction_bias="gate.e_score_correction_bias"),
    tiny=("DeepseekV3Config", dict(num_key_value_heads=4, intermediate_size=48, moe_intermediate_size=16,
                                   n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
                                   n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=16,
                                   qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
                                   routed_scaling_factor=2.5)),
    cases={
        "deepseek_v3": ("DeepseekV3Config", dict(hidden_size=40, num_attention_heads=4, num_key_value_heads=4,
                                                 intermediate_size=36, moe_intermediate_size=12, n_routed_experts=8,
                                                 num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1,
                                                 first_k_dense_replace=1, q_lora_rank=24, kv_lora_rank=20,
                                                 qk_rope_head_dim=6, qk_nope_head_dim=8, v_head_dim=10,
                                                 routed_scaling_factor=2.5, rope_interleave=True,
                                                 rope_parameters=_YARN)),
        "deepseek_v3_plain_q": ("DeepseekV3Config", dict(hidden_size=32, num_attention_heads=2,
                                                         num_key_value_heads=2, intermediate_size=24,
                                                         moe_intermediate_size=8, n_routed_experts=4,
                                                         num_experts_per_tok=2, n_group=1, topk_group=1,
                                                         n_shared_experts=1, first_k_dense_replace=0,
                                                         q_lora_rank=None, kv_lora_rank=12, qk_rope_head_dim=4,
                                                         qk_nope_head_dim=6, v_head_dim=6, rope_interleave=False)),
    },
)
