"""OLMoE (OlmoeForCausalLM): softmax top-k, QK RMSNorm over the whole projection, then clip_qkv.

Role: the family table entry (format/families.py, model/arch.py, model/weights.py, format/tiny.py read
it) and its tiny test configs. Every layer MoE, no shared expert.
"""
from ._base import Attention, Family, Moe
from ._gguf import QK_NORM, REQUIRED, GgufArch, config_rows
from ._rules import N_EXPERTS
from ._values import need, softmax_kind


def moe(hf):
    n_exp, k = need(hf, N_EXPERTS, 64), need(hf, "num_experts_per_tok", 8)
    n_layers = need(hf, "num_hidden_layers")
    return Moe(need(hf, "hidden_size"), need(hf, "intermediate_size", 2048), n_exp, k,
               dict(kind=softmax_kind(hf.get("norm_topk_prob", False))), n_layers, tuple(range(n_layers)))


def attention(hf, n_layers, where):
    bias = bool(hf.get("attention_bias", False))
    return Attention(qkv_bias=bias, o_bias=bias, qk_norm="full", clip_qkv=float(hf.get("clip_qkv") or 0.0))


FAMILY = Family(
    "olmoe", moe, attention,
    # llama.cpp's olmoe graph never renormalises the top-k weights; its q/k norms span the whole projection
    gguf=GgufArch("olmoe", "OlmoeForCausalLM", fixed={"norm_topk_prob": False}, layer_tensors=QK_NORM,
                  config=config_rows("expert_feed_forward_length",
                                     add=(("feed_forward_length", "intermediate_size", REQUIRED),
                                          ("attention.clamp_kqv", "clip_qkv", None)))),
    tiny=("OlmoeConfig", dict(intermediate_size=16, num_experts=8, eos_token_id=1, num_experts_per_tok=2)),
    cases={"olmoe": ("OlmoeConfig", dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=4,
                                         intermediate_size=18, num_experts=8, num_experts_per_tok=2, clip_qkv=1.5,
                                         tie_word_embeddings=True))},
)
