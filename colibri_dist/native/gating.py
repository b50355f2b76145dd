"""Gating: a GatingSpec (format/gating_spec.py) that the C core can take as cb_gating.

Role: the native boundary of routing rules; Runtime.route / moe_forward accept any
GatingSpec and convert it here with to_c().
"""
from ..format.gating_spec import BY_NAME, GATING_KINDS, MAX_EXPERTS, MAX_TOPK, GatingSpec
from ._lib import ffi

__all__ = ["Gating", "GatingSpec", "GATING_KINDS", "MAX_EXPERTS", "MAX_TOPK", "to_c"]


def to_c(spec):
    """A fresh cb_gating * (owned by the returned cdata) for any GatingSpec."""
    g = ffi.new("cb_gating *")
    g.kind = GATING_KINDS[spec.kind]
    g.n_experts, g.top_k = spec.n_experts, spec.top_k
    g.n_group, g.topk_group = spec.n_group, spec.topk_group
    g.norm_topk_prob = int(bool(spec.norm_topk_prob))
    g.routed_scaling_factor = float(spec.routed_scaling_factor) if BY_NAME[spec.kind].scaled else 1.0
    return g


class Gating(GatingSpec):
    """GatingSpec with a to_c() method (kept for callers that build gating by hand)."""

    def to_c(self):
        return to_c(self)
