"""Qwen2-MoE (Qwen2MoeForCausalLM): softmax top-k, a shared MLP behind a sigmoid gate, q/k/v biases.

Role: the family table entry (format/families.py, model/arch.py, model/weights.py, format/tiny.py read
it) and its tiny test configs. Dense layers: mlp_only_layers and decoder_sparse_step; sliding windows
per layer_types (or use_sliding_window + max_window_layers).
"""
from ..errors import FormatError
from ._base import Attention, Family, Moe, Names
from ._gguf import COMMON_CONFIG, QKV_BIAS, SHARED_EXPERT, GgufArch
from ._rules import N_EXPERTS, qwen_sparse_layers
from ._values import need, softmax_kind


def moe(hf):
    n_exp, k = need(hf, N_EXPERTS, 60), need(hf, "num_experts_per_tok", 4)
    shared = need(hf, "shared_expert_intermediate_size", 5632) if hf.get("shared_expert_intermediate_size") != 0 else 0
    return Moe(need(hf, "hidden_size"), need(hf, "moe_intermediate_size", 1408), n_exp, k,
               dict(kind=softmax_kind(hf.get("norm_topk_prob", False))), need(hf, "num_hidden_layers"),
               qwen_sparse_layers(hf), shared_inter=shared, shared_gate=shared > 0)


def attention(hf, n_layers, where):
    return Attention(qkv_bias=bool(hf.get("qkv_bias", True)), o_bias=False, windows=_windows(hf, n_layers, where))


def _windows(hf, n_layers, where):
    types = hf.get("layer_types") or [
        "sliding_attention" if (i + 1) % 2 and i < hf.get("max_window_layers", 28) and hf.get("use_sliding_window")
        else "full_attention" for i in range(n_layers)]
    if len(types) != n_layers or set(types) - {"sliding_attention", "full_attention"}:
        raise FormatError(f"{where}: layer_types {types!r} must name full_attention/sliding_attention per layer")
    w = int(hf.get("sliding_window") or 0) if hf.get("use_sliding_window") else 0
    return tuple(w if t == "sliding_attention" else 0 for t in types)


FAMILY = Family(
    "qwen2_moe", moe, attention,
    gguf=GgufArch("qwen2moe", "Qwen2MoeForCausalLM",
                  config=COMMON_CONFIG + (("expert_shared_feed_forward_length", "shared_expert_intermediate_size", 0),),
                  fixed={"norm_topk_prob": False}, layer_tensors=dict(QKV_BIAS, **SHARED_EXPERT)),
    names=Names(shared="shared_expert", shared_gate="shared_expert_gate"),
    tiny=("Qwen2MoeConfig", dict(intermediate_size=48, moe_intermediate_size=16, shared_expert_intermediate_size=24,
                                 num_experts=8, num_experts_per_tok=2, norm_topk_prob=False)),
    cases={"qwen2_moe": ("Qwen2MoeConfig", dict(hidden_size=40, num_attention_heads=5, num_key_value_heads=5,
                                                intermediate_size=28, moe_intermediate_size=12,
                                                shared_expert_intermediate_size=20, num_experts=6,
                                                num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[1],
                                                use_sliding_window=True, sliding_window=12, max_window_layers=2))},
)
