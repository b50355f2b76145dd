"""GatingSpec: the routing rule of one MoE layer as plain, validated data.

Role in the data flow: the container reader builds one from the header (format/
model_config.py) and hands it up; the native boundary (native/gating.py) turns it
into the C core's cb_gating. Kept here, free of the compiled core, so that
format/ never imports native/ (colibri inspect works without the C build).
  softmax_topk_norm  softmax, top-k, renormalise      (Mixtral; Qwen2/3-MoE with norm_topk_prob)
  softmax_topk       softmax, top-k, no renormalise   (OLMoE; Qwen2/3-MoE without norm_topk_prob)
  sigmoid_group      DeepSeek-V3: sigmoid, +correction bias for selection only, group-limited
                     top-k (n_group, topk_group), optional renormalise, * routed_scaling_factor
"""
import math
from dataclasses import dataclass

from ..errors import InvalidArgument

GATING_KINDS = {"softmax_topk_norm": 0, "softmax_topk": 1, "sigmoid_group": 2}
MAX_EXPERTS, MAX_TOPK = 1024, 64


@dataclass(frozen=True)
class GatingSpec:
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
