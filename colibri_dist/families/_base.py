"""Family: one Hugging Face MoE model family as one table entry (plain data + builders of config.json).

Role in the data flow: each family file of this package holds one `FAMILY = Family(...)`; the registry
(__init__.py) collects them by model_type. Readers:
  format/families.py    detect(config.json) -> Family; `moe(hf)` -> ModelConfig (gating, MoE layers, shared)
  format/convert.py     the MoE source tensor names (`names`, both the hub and the fused expert layouts)
  format/config_values  the family's own config keys and their types (`values`)
  model/arch.py         `attention(hf, n_layers)` -> GQA features (biases, QK-norm, clip_qkv, windows) or MLA
  model/weights.py      the per-layer decoder tensor names (`names`)
  format/tiny.py        `tiny`: the seeded MoE-block oracle checkpoint; tests/model: `cases`, whole models
Nothing here imports the rest of colibri_dist but errors: format/ and model/ build their own types from it.
"""
import re
from dataclasses import dataclass, field

STD_PARTS = ("gate_proj", "up_proj", "down_proj")
_LAYER = re.compile(r"model\.layers\.(\d+)\.")


@dataclass(frozen=True)
class Names:
    """Source tensor names inside `model.layers.{i}.` (the checkpoint's, kept as-is in the container)."""
    moe_prefixes: tuple = ("mlp",)     # candidate MoE module names inside a layer, tried in order
    expert_parts: tuple = STD_PARTS    # per-expert tensor stems for (gate, up, down)
    router: str = "gate"               # {moe}.{router}.weight [E, h]
    correction_bias: str = ""          # {moe}.{this} [E] selection-only bias ("" = none)
    shared: str = ""                   # shared MLP module name ("" = none)
    shared_gate: str = ""              # {moe}.{this}.weight [1, h] sigmoid gate of the shared MLP ("" = none)
    attn: str = "self_attn"            # attention module: {attn}.{q,k,v,o}_proj, {attn}.{q,k}_norm
    input_norm: str = "input_layernorm"
    post_attn_norm: str = "post_attention_layernorm"
    dense_mlp: str = "mlp"             # a dense layer's SwiGLU MLP: {dense_mlp}.{gate,up,down}_proj.weight
    fused: str = "gate_rows"           # the fused experts' layout: "gate_rows" (gate_up_proj [E, 2I, H], gate rows
                                       # first) | "interleaved" (gpt-oss: gate_up_proj [E, H, 2I], gate and up in
                                       # alternate columns, down_proj [E, I, H], + gate_up_proj_bias, down_proj_bias)
    expert_biases: bool = False        # experts carry biases (gpt-oss): fused as above, per expert (a GGUF import)
                                       # {moe}.experts.{e}.{part}.bias


@dataclass(frozen=True)
class Attention:
    """What the decoder needs to know about a family's attention beyond the common config keys."""
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: str = "none"      # "none" | "head" (RMSNorm per head) | "full" (over the whole projection)
    clip_qkv: float = 0.0      # 0 = none; clamps q, k, v after a "full" norm
    windows: tuple = None      # per layer: 0 = full attention, else the sliding window; None = all 0
    mla: bool = False          # DeepSeek multi-head latent attention (model/arch.py reads the MLA dims)
    sinks: bool = False        # per-head learned sink logits {attn}.sinks [n_heads] in the softmax (gpt-oss)


@dataclass(frozen=True)
class Moe:
    """The MoE part of config.json as plain data (format/families.py makes the ModelConfig of it)."""
    hidden: int
    inter: int
    n_experts: int
    top_k: int
    gating: dict               # GatingSpec fields but n_experts/top_k: kind (format/gating_spec.KINDS), ...
    n_layers: int
    moe_layers: tuple
    shared_inter: int = 0
    shared_gate: bool = False
    act: dict = None           # the experts' activation: None = SwiGLU; dict(kind="swiglu_oai", alpha=, limit=)


@dataclass(frozen=True)
class Family:
    model_type: str            # config.json "model_type"; also the module's file name
    moe: object                # hf -> Moe
    attention: object          # (hf, n_layers, where) -> Attention
    names: Names = Names()
    values: dict = field(default_factory=dict)   # extra config keys -> kind ("bool?", ...: format/config_values)
    tiny: tuple = None         # (transformers config class name, kwargs over format/tiny.py's common sizes)
    cases: dict = field(default_factory=dict)    # whole-model oracle cases: name -> (class name, kwargs)
    drop_extra_layers: bool = False   # tensors of model.layers.{i >= num_hidden_layers} (multi-token-prediction
                                      # modules transformers ignores on load) are not converted
    gguf: object = None        # _gguf.GgufArch: how llama.cpp's GGUF files of this family are imported (None: not yet)

    @property
    def name(self):
        return self.model_type

    def dropped(self, name, n_layers):
        """True for a source tensor the converter leaves out (a layer past the decoder's last)."""
        m = _LAYER.match(name) if self.drop_extra_layers else None
        return bool(m) and int(m.group(1)) >= n_layers

    def layer_prefix(self, layer, prefix):
        return f"model.layers.{layer}.{prefix}"

    def router_name(self, p):
        return f"{p}.{self.names.router}.weight"

    def per_expert_names(self, p, e):
        return tuple(f"{p}.experts.{e}.{part}.weight" for part in self.names.expert_parts)

    def fused_names(self, p):
        return f"{p}.experts.gate_up_proj", f"{p}.experts.down_proj"

    def fused_bias_names(self, p):
        """The fused experts' bias tensors (gate_up [E, 2I], down [E, H]), or None when the family has none."""
        if not self.names.expert_biases:
            return None
        return f"{p}.experts.gate_up_proj_bias", f"{p}.experts.down_proj_bias"

    def per_expert_bias_names(self, p, e):
        """Expert e's (gate, up, down) bias tensors in the per-expert layout, or None."""
        if not self.names.expert_biases:
            return None
        return tuple(f"{p}.experts.{e}.{part}.bias" for part in self.names.expert_parts)

    def shared_names(self, p):
        if not self.names.shared:
            return None
        return tuple(f"{p}.{self.names.shared}.{part}.weight" for part in STD_PARTS)

    def shared_gate_name(self, p):
        return f"{p}.{self.names.shared_gate}.weight" if self.names.shared_gate else None

    def bias_name(self, p):
        return f"{p}.{self.names.correction_bias}" if self.names.correction_bias else None
