"""gpt-oss (GptOssForCausalLM): every layer MoE; the router is a linear layer with a bias, softmax over its
top-k logits (softmax_topk_norm on the biased logits); experts with biases and the clamped SwiGLU
(swiglu_alpha, swiglu_limit), stored fused as gate_up_proj [E, H, 2I] with gate and up interleaved column by
column; GQA with q/k/v/o biases (attention_bias), per-head attention sinks, sliding_attention /
full_attention layers (layer_types, sliding_window), yarn rope.

Role: the family table entry (format/families.py, model/arch.py, model/weights.py, format/tiny.py read
it) and its tiny test configs. The hub's MXFP4 checkpoints (experts as *_blocks / *_scales) need the mxfp4
expert encoding; a float (bf16/f32) checkpoint converts to any encoding.
"""
from ..errors import FormatError
from ._base import Attention, Family, Moe, Names
from ._values import need, number

TYPES = ("sliding_attention", "full_attention")


def moe(hf):
    n_layers = need(hf, "num_hidden_layers")
    act = dict(kind="swiglu_oai", alpha=number(hf, "swiglu_alpha", 1.702), limit=number(hf, "swiglu_limit", 7.0))
    return Moe(need(hf, "hidden_size"), need(hf, "intermediate_size"), need(hf, ("num_local_experts", "num_experts")),
               need(hf, ("num_experts_per_tok", "experts_per_token")), dict(kind="softmax_topk_norm"), n_layers,
               tuple(range(n_layers)), act=act)


def attention(hf, n_layers, where):
    bias = bool(hf.get("attention_bias", True))
    return Attention(qkv_bias=bias, o_bias=bias, windows=_windows(hf, n_layers, where), sinks=True)


def _windows(hf, n_layers, where):
    """transformers' default: even layers slide (layer_types), the others attend to everything."""
    types = hf.get("layer_types") or [TYPES[i % 2] for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers or set(types) - set(TYPES):
        raise FormatError(f"{where}: layer_types {types!r} must name full_attention/sliding_attention per layer")
    window = need(hf, "sliding_window", 128) if "sliding_attention" in types else 0
    return tuple(window if t == "sliding_attention" else 0 for t in types)


FAMILY = Family(
    "gpt_oss", moe, attention,
    names=Names(router="router", correction_bias="router.bias", fused="interleaved"),
    values={"swiglu_alpha": "float?", "swiglu_limit": "float?"},
    tiny=("GptOssConfig", dict(intermediate_size=16, num_local_experts=8, num_experts_per_tok=2, head_dim=8,
                               sliding_window=6, swiglu_limit=0.5)),
    # odd sizes; GQA 3; a window (12) shorter than the oracle's 48-token prompt on layers 0 and 2; yarn with
    # truncate off (the hub configs'); a swiglu_limit and alpha small enough that the clamps act
    cases={"gpt_oss": ("GptOssConfig", dict(hidden_size=36, num_attention_heads=6, num_key_value_heads=2,
                                            head_dim=10, intermediate_size=20, num_local_experts=4,
                                            num_experts_per_tok=2, sliding_window=12, swiglu_limit=0.6,
                                            swiglu_alpha=1.5, rope_parameters=dict(
                                                rope_type="yarn", factor=8.0, beta_fast=32.0, beta_slow=1.0,
                                                truncate=False, original_max_position_embeddings=16,
                                                rope_theta=150000.0)))},
)
