"""The gating kinds (one table) and GatingSpec: the routing rule of one MoE layer as plain, validated data.

Role in the data flow: KINDS is the Python side's only list of gating kinds: the container header's
`gating_kind` codes (format/spec.py), GatingSpec's validation, the native boundary (native/gating.py
turns a GatingSpec into the C core's cb_gating) and the numpy reference of routing/policy.py all read
it. It is a copy of C's `cb_gating_kind` (colibri.h) as plain data, so format/ never needs the compiled
core (colibri inspect works without the C build); tests/native/test_native_gating_kinds.py checks it
against the C enum name by name and code by code, and each row's semantics against cb_gate_logits.
A new kind is one enum value + its kernel in C (native/src/gating.c) and one row here.
"""
import math
from dataclasses import dataclass

from ..errors import InvalidArgument


@dataclass(frozen=True)
class GatingKind:
    name: str          # GatingSpec.kind; C: CB_GATE_<NAME upper-cased>
    code: int          # cb_gating_kind value; the container header's gating_kind
    scores: str        # "softmax" | "sigmoid" of the router logits
    renorm: str        # the k chosen weights: "always" / "never" renormalised, or per "norm_topk_prob"
    grouped: bool      # + correction bias for selection only, group-limited top-k (n_group, topk_group)
    scaled: bool       # final weights *= routed_scaling_factor
    bias: str          # the layer's per-expert bias (if any): "logits" (the router's linear bias, added to every
                       # logit before selection and weights) | "selection" (added to the scores for selection only)
    used_by: str


KINDS = (
    GatingKind("softmax_topk_norm", 0, "softmax", "always", False, False, "logits",
               "Mixtral; Qwen2/3-MoE and OLMoE with norm_topk_prob; gpt-oss (router bias)"),
    GatingKind("softmax_topk", 1, "softmax", "never", False, False, "logits",
               "OLMoE; Qwen2/3-MoE without norm_topk_prob"),
    GatingKind("sigmoid_group", 2, "sigmoid", "norm_topk_prob", True, True, "selection", "DeepSeek-V3, GLM-4.5 MoE"),
)
BY_NAME = {k.name: k for k in KINDS}
GATING_KINDS = {k.name: k.code for k in KINDS}      # name -> code
GATING_NAMES = {k.code: k.name for k in KINDS}      # code -> name
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
        if BY_NAME[self.kind].grouped:
            if self.n_group < 1 or self.n_experts % self.n_group:
                raise InvalidArgument(f"gating n_group={self.n_group} must divide n_experts={self.n_experts}")
            if not 1 <= self.topk_group <= self.n_group:
                raise InvalidArgument(f"gating topk_group={self.topk_group} outside 1..n_group={self.n_group}")
            if self.top_k > self.topk_group * (self.n_experts // self.n_group):
                raise InvalidArgument(f"gating top_k={self.top_k} exceeds the experts of topk_group={self.topk_group} groups")
            if not math.isfinite(self.routed_scaling_factor):
                raise InvalidArgument("gating routed_scaling_factor must be finite")
