"""ModelConfig: the MoE-relevant model description stored in a .colibri header.

Role in the data flow: built by convert.py from a Hugging Face config.json
(via families.py), packed into the header by the writer, rebuilt by the reader
from the header, and handed to routing/engine code. `gating` is a
plain GatingSpec (format/gating_spec.py); the native boundary converts it. `act` is the
routed experts' activation (layout.Activation: SwiGLU, or gpt-oss's clamped one).
"""
from dataclasses import dataclass, field

from ..errors import FormatError, InvalidArgument
from . import spec
from .gating_spec import GatingSpec
from .layout import ACTIVATIONS, MIXED, MIXED_CODE, SCHEMES, SILU, Activation

ACTIVATION_NAMES = {code: name for name, code in ACTIVATIONS.items()}


def make_gating(kind, n_experts, top_k, n_group=1, topk_group=1, norm_topk_prob=True,
                routed_scaling_factor=1.0, where="config.json"):
    """A validated GatingSpec; FormatError naming `where` if the parameters are invalid."""
    try:
        return GatingSpec(kind, n_experts, top_k, n_group=n_group, topk_group=topk_group,
                      norm_topk_prob=norm_topk_prob, routed_scaling_factor=routed_scaling_factor)
    except InvalidArgument as exc:
        raise FormatError(f"{where}: invalid gating: {exc}") from exc


@dataclass(frozen=True)
class ModelConfig:
    family: str
    hidden: int
    inter: int
    n_experts: int
    top_k: int
    gating: object
    n_layers: int
    moe_layers: tuple
    shared_inter: int = 0
    shared_gate: bool = False
    scheme: str = "f32"            # the experts' encoding, or MIXED (each matrix's descriptor names its own)
    act: Activation = SILU         # the routed experts' gated activation (header expert_act, swiglu_alpha/limit)
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def header_fields(self):
        g = self.gating
        code = MIXED_CODE if self.scheme == MIXED else SCHEMES[self.scheme]
        return dict(family=self.family, scheme=self.scheme, scheme_code=code,
                    hidden=self.hidden, inter=self.inter, n_experts=self.n_experts, top_k=self.top_k,
                    n_layers=self.n_layers, n_moe_layers=len(self.moe_layers),
                    shared_inter=self.shared_inter, shared_gate=int(self.shared_gate),
                    gating_kind=spec.GATING_KINDS[g.kind], n_group=g.n_group, topk_group=g.topk_group,
                    norm_topk_prob=int(bool(g.norm_topk_prob)),
                    routed_scaling_factor=float(g.routed_scaling_factor),
                    moe_mask=spec.moe_mask_bytes(self.moe_layers), expert_act=ACTIVATIONS[self.act.kind],
                    swiglu_alpha=float(self.act.alpha), swiglu_limit=float(self.act.limit))

    @classmethod
    def from_header(cls, h, extra=None, where="header"):
        gating = make_gating(spec.GATING_NAMES[h["gating_kind"]], h["n_experts"], h["top_k"],
                             n_group=h["n_group"], topk_group=h["topk_group"],
                             norm_topk_prob=bool(h["norm_topk_prob"]),
                             routed_scaling_factor=h["routed_scaling_factor"], where=where)
        return cls(family=h["family"], hidden=h["hidden"], inter=h["inter"], n_experts=h["n_experts"],
                   top_k=h["top_k"], gating=gating, n_layers=h["n_layers"],
                   moe_layers=tuple(spec.moe_mask_layers(h["moe_mask"], h["n_layers"])),
                   shared_inter=h["shared_inter"], shared_gate=bool(h["shared_gate"]),
                   scheme=h["scheme"], act=header_activation(h), extra=extra or {})


def header_activation(h):
    """The Activation of the header fields (validate.py has checked them); SILU for the plain SwiGLU."""
    kind = ACTIVATION_NAMES[h["expert_act"]]
    return SILU if kind == "silu" else Activation(kind, h["swiglu_alpha"], h["swiglu_limit"])
