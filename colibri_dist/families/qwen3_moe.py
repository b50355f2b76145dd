"""Qwen3-MoE (Qwen3MoeForCausalLM): softmax top-k (renormalised with norm_topk_prob), per-head QK RMSNorm.

Role: the family table entry (format/families.py, model/arch.py, model/weights.py, format/tiny.py read
it) and its tiny test configs. Dense layers as Qwen2-MoE (mlp_only_layers, decoder_sparse_step).
"""
from ._base import Attention, Family, Moe
from ._gguf import COMMON_CONFIG, QK_NORM, GgufArch
from ._rules import N_EXPERTS, qwen_sparse_layers
from ._values import need, softmax_kind


def moe(hf):
    n_exp, k = need(hf, N_EXPERTS, 128), need(hf, "num_experts_per_tok", 8)
    return Moe(need(hf, "hidden_size"), need(hf, "moe_intermediate_size", 768), n_exp, k,
               dict(kind=softmax_kind(hf.get("norm_topk_prob", False))), need(hf, "num_hidden_layers"),
               qwen_sparse_layers(hf))


def attention(hf, n_layers, where):
    bias = bool(hf.get("attention_bias", False))
    window = int(hf.get("sliding_window") or 0) if hf.get("use_sliding_window") else 0
    return Attention(qkv_bias=bias, o_bias=bias, qk_norm="head", windows=(window,) * n_layers)


FAMILY = Family(
    "qwen3_moe", moe, attention,
    gguf=GgufArch("qwen3moe", "Qwen3MoeForCausalLM", config=COMMON_CONFIG + (("attention.key_length", "head_dim", None),),
                  fixed={"norm_topk_prob": True}, layer_tensors=QK_NORM),
    tiny=("Qwen3MoeConfig", dict(intermediate_size=48, moe_intermediate_size=16, num_experts=8,
                                 num_experts_per_tok=2, norm_topk_prob=True, head_dim=8)),
    cases={"qwen3_moe": ("Qwen3MoeConfig", dict(hidden_size=48, num_attention_heads=8, num_key_value_heads=2,
                                                head_dim=12, intermediate_size=24, moe_intermediate_size=14,
                                                num_experts=8, num_experts_per_tok=3, norm_topk_prob=True))},
)
