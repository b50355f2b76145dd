"""The converter's view of a model family: config.json -> Family entry -> ModelConfig.

Role in the data flow: convert.py asks `detect(hf_config)` for the Family (the table entry of
colibri_dist/families/, which names the MoE source tensors) and `model_config(family, hf, scheme)`
for the ModelConfig stored in the header (gating semantics as a validated GatingSpec, MoE layers,
shared experts). Both source layouts are known to the entry: the hub's per-expert tensors (Mixtral
`block_sparse_moe.experts.{e}.w1/w3/w2`, others `mlp.experts.{e}.gate_proj/up_proj/down_proj`) and the
fused tensors of transformers >= 5 modules (`mlp.experts.gate_up_proj [E, 2I, H]` with gate rows first,
`mlp.experts.down_proj [E, H, I]`), as in transformers' conversion_mapping.
"""
from .. import families
from .model_config import ModelConfig, make_gating

FAMILIES = families.FAMILIES


def detect(hf, path="config.json"):
    """hf: parsed config.json -> Family; FormatError listing the supported ones otherwise."""
    return families.get(hf.get("model_type"), path, hf.get("architectures") or [])


def model_config(family, hf, scheme):
    """The header's ModelConfig of config.json `hf` for `family`, experts encoded in `scheme`."""
    m = family.moe(hf)
    gating = make_gating(n_experts=m.n_experts, top_k=m.top_k, **m.gating)
    return ModelConfig(family.name, m.hidden, m.inter, m.n_experts, m.top_k, gating, m.n_layers, m.moe_layers,
                       shared_inter=m.shared_inter, shared_gate=m.shared_gate, scheme=scheme)
