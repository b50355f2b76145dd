"""Mixtral (MixtralForCausalLM): softmax top-k renormalised, every layer MoE, GQA with one sliding window.

Role: the family table entry (format/families.py, model/arch.py, model/weights.py, format/tiny.py read
it) and its tiny test configs. Hub expert tensors: block_sparse_moe.experts.{e}.w1/w3/w2.
"""
from ._base import Attention, Family, Moe, Names
from ._gguf import HEAD_DIM, REQUIRED, GgufArch, config_rows
from ._values import need


def moe(hf):
    n_exp, k = need(hf, ("num_local_experts", "num_experts"), 8), need(hf, "num_experts_per_tok", 2)
    n_layers = need(hf, "num_hidden_layers")
    return Moe(need(hf, "hidden_size"), need(hf, "intermediate_size"), n_exp, k, dict(kind="softmax_topk_norm"),
               n_layers, tuple(range(n_layers)))


def attention(hf, n_layers, where):
    bias = bool(hf.get("attention_bias", False))
    return Attention(qkv_bias=bias, o_bias=bias, windows=(int(hf.get("sliding_window") or 0),) * n_layers)


FAMILY = Family(
    "mixtral", moe, attention,
    # llama.cpp writes Mixtral as arch llama with expert_count > 0 (without experts it is a dense llama) and
    # its q/k rows permuted for interleaved rope (convert_hf_to_gguf.py LlamaModel.permute)
    gguf=GgufArch("llama", "MixtralForCausalLM", positive=("expert_count",), rope_permuted=True,
                  expert_parts=("w1", "w3", "w2"),
                  config=config_rows("expert_feed_forward_length", rename={"expert_count": "num_local_experts"},
                                     add=(("feed_forward_length", "intermediate_size", REQUIRED),) + HEAD_DIM)),
    names=Names(moe_prefixes=("block_sparse_moe", "mlp"), expert_parts=("w1", "w3", "w2")),
    tiny=("MixtralConfig", dict(intermediate_size=16, num_local_experts=8, num_experts_per_tok=2)),
    cases={"mixtral": ("MixtralConfig", dict(hidden_size=36, num_attention_heads=6, num_key_value_heads=2,
                                             head_dim=10, intermediate_size=20, num_local_experts=4,
                                             num_experts_per_tok=2, sliding_window=16))},
)
