"""Per-family knowledge of Hugging Face MoE checkpoints: config keys and tensor names.

Role in the data flow: convert.py asks `detect(hf_config)` for a Family, which
turns config.json into a ModelConfig (gating semantics, MoE layers, shared
experts) and names the source tensors of each MoE layer. Both source layouts
are known: the hub's per-expert tensors (Mixtral `block_sparse_moe.experts.{e}.w1/w3/w2`,
others `mlp.experts.{e}.gate_proj/up_proj/down_proj`) and the fused tensors of
transformers >= 5 modules (`mlp.experts.gate_up_proj [E, 2I, H]` with gate rows
first, `mlp.experts.down_proj [E, H, I]`), as in transformers' conversion_mapping.
"""
from dataclasses import dataclass

from ..errors import FormatError
from .model_config import ModelConfig, make_gating


@dataclass(frozen=True)
class Family:
    name: str
    prefixes: tuple          # candidate MoE module names inside a layer, tried in order
    expert_parts: tuple      # per-expert tensor stems for (gate, up, down)
    shared_name: str = ""    # shared MLP module name ("" = none)
    has_shared_gate: bool = False
    has_bias: bool = False

    def model_config(self, hf, scheme):
        return _CONFIG_BUILDERS[self.name](hf, scheme)

    def layer_prefix(self, layer, prefix):
        return f"model.layers.{layer}.{prefix}"

    def per_expert_names(self, p, e):
        return tuple(f"{p}.experts.{e}.{part}.weight" for part in self.expert_parts)

    def fused_names(self, p):
        return f"{p}.experts.gate_up_proj", f"{p}.experts.down_proj"

    def shared_names(self, p):
        if not self.shared_name:
            return None
        return tuple(f"{p}.{self.shared_name}.{part}.weight" for part in ("gate_proj", "up_proj", "down_proj"))

    def shared_gate_name(self, p):
        return f"{p}.shared_expert_gate.weight" if self.has_shared_gate else None

    def bias_name(self, p):
        return f"{p}.gate.e_score_correction_bias" if self.has_bias else None


_STD = ("gate_proj", "up_proj", "down_proj")
FAMILIES = {
    "mixtral": Family("mixtral", ("block_sparse_moe", "mlp"), ("w1", "w3", "w2")),
    "qwen2_moe": Family("qwen2_moe", ("mlp",), _STD, shared_name="shared_expert", has_shared_gate=True),
    "qwen3_moe": Family("qwen3_moe", ("mlp",), _STD),
    "olmoe": Family("olmoe", ("mlp",), _STD),
    "deepseek_v3": Family("deepseek_v3", ("mlp",), _STD, shared_name="shared_experts", has_bias=True),
}


def detect(hf, path="config.json"):
    """hf: parsed config.json -> Family; FormatError listing the supported ones otherwise."""
    model_type = hf.get("model_type")
    if model_type not in FAMILIES:
        arch = hf.get("architectures") or []
        raise FormatError(f"{path}: unsupported architecture model_type={model_type!r} {arch}; "
                          f"supported: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type]


def _need(hf, key, default=None):
    """hf[key] as a positive integer (key may be a tuple of aliases, first present wins), else default,
    else FormatError naming the key."""
    keys = key if isinstance(key, tuple) else (key,)
    value = next((hf[k] for k in keys if hf.get(k) is not None), default)
    if value is None:
        raise FormatError(f"config.json: missing key {keys[0]!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise FormatError(f"config.json: {keys[0]!r} must be a positive integer, got {value!r}")
    return value


def _float(hf, key, default):
    value = hf.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FormatError(f"config.json: {key!r} must be a number, got {value!r}")
    return float(value)


def _layer_list(hf, key):
    value = hf.get(key) or []
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise FormatError(f"config.json: {key!r} must be a list of layer indices, got {value!r}")
    return set(value)


# transformers >= 5 saves some configs with the aliased name (e.g. Qwen3-MoE num_local_experts)
_N_EXPERTS = ("num_experts", "num_local_experts")


def _softmax_kind(norm):
    return "softmax_topk_norm" if norm else "softmax_topk"


def _qwen_moe_layers(hf):
    n_layers = _need(hf, "num_hidden_layers")
    skip = _layer_list(hf, "mlp_only_layers")
    step = _need(hf, "decoder_sparse_step", 1)
    return tuple(i for i in range(n_layers)
                 if i not in skip and _need(hf, _N_EXPERTS) > 0 and (i + 1) % step == 0)


def _mixtral(hf, scheme):
    n_exp, k = _need(hf, ("num_local_experts", "num_experts"), 8), _need(hf, "num_experts_per_tok", 2)
    n_layers = _need(hf, "num_hidden_layers")
    return ModelConfig("mixtral", _need(hf, "hidden_size"), _need(hf, "intermediate_size"), n_exp, k,
                       make_gating("softmax_topk_norm", n_exp, k), n_layers, tuple(range(n_layers)),
                       scheme=scheme)


def _qwen2(hf, scheme):
    n_exp, k = _need(hf, _N_EXPERTS, 60), _need(hf, "num_experts_per_tok", 4)
    gating = make_gating(_softmax_kind(hf.get("norm_topk_prob", False)), n_exp, k)
    shared = _need(hf, "shared_expert_intermediate_size", 5632) if hf.get("shared_expert_intermediate_size") != 0 else 0
    return ModelConfig("qwen2_moe", _need(hf, "hidden_size"), _need(hf, "moe_intermediate_size", 1408),
                       n_exp, k, gating, _need(hf, "num_hidden_layers"), _qwen_moe_layers(hf),
                       shared_inter=shared, shared_gate=shared > 0, scheme=scheme)


def _qwen3(hf, scheme):
    n_exp, k = _need(hf, _N_EXPERTS, 128), _need(hf, "num_experts_per_tok", 8)
    gating = make_gating(_softmax_kind(hf.get("norm_topk_prob", False)), n_exp, k)
    return ModelConfig("qwen3_moe", _need(hf, "hidden_size"), _need(hf, "moe_intermediate_size", 768),
                       n_exp, k, gating, _need(hf, "num_hidden_layers"), _qwen_moe_layers(hf), scheme=scheme)


def _olmoe(hf, scheme):
    n_exp, k = _need(hf, _N_EXPERTS, 64), _need(hf, "num_experts_per_tok", 8)
    n_layers = _need(hf, "num_hidden_layers")
    gating = make_gating(_softmax_kind(hf.get("norm_topk_prob", False)), n_exp, k)
    return ModelConfig("olmoe", _need(hf, "hidden_size"), _need(hf, "intermediate_size", 2048), n_exp, k,
                       gating, n_layers, tuple(range(n_layers)), scheme=scheme)


def _deepseek_v3(hf, scheme):
    n_exp, k = _need(hf, ("n_routed_experts", "num_local_experts"), 256), _need(hf, "num_experts_per_tok", 8)
    inter = _need(hf, "moe_intermediate_size", 2048)
    n_layers = _need(hf, "num_hidden_layers")
    first_dense = hf.get("first_k_dense_replace", 3) or 0
    if isinstance(first_dense, bool) or not isinstance(first_dense, int) or first_dense < 0:
        raise FormatError(f"config.json: 'first_k_dense_replace' must be a non-negative integer, got {first_dense!r}")
    gating = make_gating("sigmoid_group", n_exp, k, n_group=_need(hf, "n_group", 8),
                         topk_group=_need(hf, "topk_group", 4),
                         norm_topk_prob=bool(hf.get("norm_topk_prob", True)),
                         routed_scaling_factor=_float(hf, "routed_scaling_factor", 2.5))
    return ModelConfig("deepseek_v3", _need(hf, "hidden_size"), inter, n_exp, k, gating, n_layers,
                       tuple(range(first_dense, n_layers)),
                       shared_inter=inter * (_need(hf, "n_shared_experts", 1) if hf.get("n_shared_experts", 1) else 0),
                       scheme=scheme)


_CONFIG_BUILDERS = {"mixtral": _mixtral, "qwen2_moe": _qwen2, "qwen3_moe": _qwen3,
                    "olmoe": _olmoe, "deepseek_v3": _deepseek_v3}
