"""gpt-oss (GptOssForCausalLM): every layer MoE; the router is a linear layer with a bias, softmax over its
top-k logits (softmax_topk_norm on the biased logits); experts with biases and the clamped SwiGLU
(swiglu_alpha, swiglu_limit), stored fused as gate_up_proj [E, H, 2I] with gate and up interleaved column by
column; GQA with q/k/v/o biases (attention_bias), per-head attention sinks, sliding_attention /
full_attention layers (layer_types, sliding_window), yarn rope.

Role: the family table entry (format/families.py, model/arch.py, model/weights.py, format/tiny.py read
it) and its tiny test configs. The hub's MXFP4 checkpoints (experts as *_blocks / *_scales) keep their blocks
with --experts mxfp4 (format/fused_experts.py repacks them exactly) or are decoded for any other encoding.
"""
from ..errors import FormatError
from ._base import Attention, Family, Moe, Names
from ._gguf import HEAD_DIM, QKV_BIAS, REQUIRED, GgufArch, config_rows
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
    # convert_hf_to_gguf.py GptOssModel: gate_up_proj split (and transposed) into the ffn_{gate,up}_exps stacks,
    # their biases into ffn_{gate,up,down}_exps.bias; the sinks as attn_sinks.weight; post_attention_norm.
    # llama.cpp's graph (src/models/openai-moe.cpp, llama-graph.cpp) fixes alpha 1.702 and limit 7.0, biased
    # attention and every other layer sliding (no sliding_window_pattern key: pattern 2, the layer_types
    # default); its yarn rounds the correction range (ggml_rope_yarn_corr_dims floor/ceil), which is
    # rope_parameters' truncate default, so no truncate key is imported.
    gguf=GgufArch("gpt-oss", "GptOssForCausalLM", yarn=True,
                  fixed={"attention_bias": True, "swiglu_alpha": 1.702, "swiglu_limit": 7.0},
                  layer_tensors=dict(QKV_BIAS, **{
                      "attn_output.bias": "self_attn.o_proj.bias", "attn_sinks.weight": "self_attn.sinks",
                      "post_attention_norm.weight": "post_attention_layernorm.weight",
                      "ffn_gate_inp.weight": "mlp.router.weight", "ffn_gate_inp.bias": "mlp.router.bias"}),
                  config=config_rows("expert_feed_forward_length", rename={"expert_count": "num_local_experts"},
                                     add=HEAD_DIM + (
                                         ("expert_feed_forward_length", "intermediate_size", REQUIRED),
                                         ("attention.sliding_window", "sliding_window", REQUIRED)))),
    names=Names(router="router", correction_bias="router.bias", fused="interleaved", expert_biases=True),
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
