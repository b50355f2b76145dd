"""Gating: the routing rule of one MoE layer, as the C core's cb_gating struct.

Role: one validated description per layer, built by the container reader from
a model config and passed to Runtime.route / moe_forward.
  softmax_topk_norm  softmax, top-k, renormalise      (Mixtral; Qwen2/3-MoE with norm_topk_prob)
  softmax_topk       softmax, top-k, no renormalise   (OLMoE; Qwen2/3-MoE without norm_topk_prob)
  sigmoid_group      DeepSeek-V3: sigmoid, +correction bias for selection only, group-limited
                     top-k (n_group, topk_group), optional renormalise, * routed_scaling_factor
"""
import math
from dataclasses import dataclass

from ..errors import InvalidArgument
from ._lib import ffi

GATING_KINDS = {"softmax_topk_norm": 0, "softmax_topk": 1, "sigmoid_group": 2}
MAX_EXPERTS, MAX_TOPK = 1024, 64


@dataclass(frozen=True)
class Gating:
    kind: str
    n_experts: int
    top_k: int
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0

    def __post_init__(self):
        if self.kind not in GATING_KINDS:
            raise InvalidArgument(f"gating kind {self.kind!r} unknown; expected one of {sorted(GATING_KINDS)}")
        if not 1 <= self.n_experts <= MAX_EXPERTS:
            raise InvalidArgument(f"gating n_experts={self.n_experts} outside 1..{MAX_EXPERTS}")
        if not 1 <= self.top_k <= min(self.n_experts, MAX_TOPK):
            raise InvalidArgument(f"gating top_k={self.top_k} outside 1..min(n_experts={self.n_experts}, {MAX_TOPK})")
        if self.kind == "sigmoid_group":
            if self.n_group < 1 or self.n_experts % self.n_group:
                raise InvalidArgument(f"gating n_group={self.n_group} must divide n_experts={self.n_experts}")
            if not 1 <= self.topk_group <= self.n_group:
                raise InvalidArgument(f"gating topk_group={self.topk_group} outside 1..n_group={self.n_group}")
            if self.top_k > self.topk_group * (self.n_experts // self.n_group):
                raise InvalidArgument(f"gating top_k={self.top_k} exceeds the experts of topk_group={self.topk_group} groups")
            if not math.isfinite(self.routed_scaling_factor):
                raise InvalidArgument("gating routed_scaling_factor must be finite")

    def to_c(self):
        """A fresh cb_gating * (owned by the returned cdata)."""
        g = ffi.new("cb_gating *")
        g.kind = GATING_KINDS[self.kind]
        g.n_experts, g.top_k = self.n_experts, self.top_k
        g.n_group, g.topk_group = self.n_group, self.topk_group
        g.norm_topk_prob = int(bool(self.norm_topk_prob))
        g.routed_scaling_factor = float(self.routed_scaling_factor) if self.kind == "sigmoid_group" else 1.0
        return g
