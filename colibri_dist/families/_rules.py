"""Builder rules more than one family shares (the family files call them with their own defaults).

Role in the data flow: the Qwen-style MoE layer rule (mlp_only_layers, decoder_sparse_step) and the
DeepSeek-V3-style MoE (sigmoid scores + correction bias, group-limited top-k, routed_scaling_factor,
n_shared_experts shared MLP, first_k_dense_replace dense layers), read from config.json.
"""
from ._base import Moe
from ._values import layer_list, need, non_negative, number

N_EXPERTS = ("num_experts", "num_local_experts")   # transformers >= 5 may save the aliased name


def qwen_sparse_layers(hf):
    """The MoE layers of a Qwen-MoE config: not in mlp_only_layers, every decoder_sparse_step-th."""
    n_layers = need(hf, "num_hidden_layers")
    skip = layer_list(hf, "mlp_only_layers")
    step = need(hf, "decoder_sparse_step", 1)
    return tuple(i for i in range(n_layers) if i not in skip and need(hf, N_EXPERTS) > 0 and (i + 1) % step == 0)


def grouped_sigmoid_moe(hf, d):
    """DeepSeek-V3-style MoE; d: this family's defaults (experts, top_k, inter, n_group, topk_group,
    scaling, first_dense) for keys config.json leaves out."""
    n_exp = need(hf, ("n_routed_experts", "num_local_experts"), d["experts"])
    k, inter = need(hf, "num_experts_per_tok", d["top_k"]), need(hf, "moe_intermediate_size", d["inter"])
    n_layers = need(hf, "num_hidden_layers")
    first_dense = non_negative(hf, "first_k_dense_replace", d["first_dense"])
    gating = dict(kind="sigmoid_group", n_group=need(hf, "n_group", d["n_group"]),
                  topk_group=need(hf, "topk_group", d["topk_group"]),
                  norm_topk_prob=bool(hf.get("norm_topk_prob", True)),
                  routed_scaling_factor=number(hf, "routed_scaling_factor", d["scaling"]))
    shared = inter * (need(hf, "n_shared_experts", 1) if hf.get("n_shared_experts", 1) else 0)
    return Moe(need(hf, "hidden_size"), inter, n_exp, k, gating, n_layers, tuple(range(first_dense, n_layers)),
               shared_inter=shared)
