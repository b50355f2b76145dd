"""The converter's view of a model family: config.json -> Family entry -> ModelConfig.

Role in the data flow: convert.py asks `detect(hf_config)` for the Family (the table entry of
colibri_dist/families/, which names the MoE source tensors) and `model_config(family, hf, scheme)`
for the ModelConfig stored in the header (gating semantics as a validated GatingSpec, MoE layers,
shared experts). Both source layouts are known to the entry: the hub's per-expert tensors (Mixtral
`block_sparse_moe.experts.{e}.w1/w3/w2`, others `mlp.experts.{e}.gate_proj/up_proj/down_proj`) and the
fused tensors of transformers >= 5 modules (`mlp.experts.gate_up_proj [E, 2I, H]` with gate rows first,
`mlp.experts.down_proj [E, H, I]`), as in transformers' conversion_mapping.
"""
import math

from .. import families
from ..errors import FormatError
from .layout import ACTIVATIONS, SILU, Activation
from .model_config import ModelConfig, make_gating

FAMILIES = families.FAMILIES


def detect(hf, path="config.json"):
    """hf: parsed config.json -> Family; FormatError listing the supported ones otherwise."""
    return families.get(hf.get("model_type"), path, hf.get("architectures") or [])


def model_config(family, hf, scheme, where="config.json"):
    """The header's ModelConfig of config.json `hf` for `family`, experts encoded in `scheme`; errors name `where`."""
    m = family.moe(hf)
    gating = make_gating(n_experts=m.n_experts, top_k=m.top_k, **m.gating)
    return ModelConfig(family.name, m.hidden, m.inter, m.n_experts, m.top_k, gating, m.n_layers, m.moe_layers,
                       shared_inter=m.shared_inter, shared_gate=m.shared_gate, scheme=scheme,
                       act=activation(m.act, where))


def activation(act, where="config.json"):
    """The Activation of a family's Moe.act (None: SwiGLU); bad parameters are a FormatError naming them."""
    if act is None:
        return SILU
    a = Activation(act["kind"], float(act.get("alpha", 0.0)), float(act.get("limit", 0.0)))
    if a.kind not in ACTIVATIONS or (a.kind == "swiglu_oai" and not (
            math.isfinite(a.alpha) and math.isfinite(a.limit) and a.limit > 0)):
        raise FormatError(f"{where}: expert activation {a.kind!r} with swiglu_alpha={a.alpha}, "
                          f"swiglu_limit={a.limit} is not supported (needs finite values, limit > 0)")
    return a
