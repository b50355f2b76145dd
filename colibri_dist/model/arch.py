"""Architecture: what the decoder needs to know about a model beyond its MoE layers.

Role in the data flow: built once per LLM from the container's `source_config` (the checkpoint's
config.json, kept in the metadata) and family; it decides attention kind (GQA or DeepSeek MLA),
q/k/v biases, QK-norm placement (per head for Qwen3-MoE, over the whole projection for OLMoE),
clip_qkv, per-layer sliding windows, rope (rope.py) and the softmax scale, and refuses what the
engine does not run with a FormatError naming the key.
"""
from dataclasses import dataclass

from ..errors import FormatError
from ..format.config_values import check_config
from .rope import RopeSpec, rope_spec, softmax_mscale


@dataclass(frozen=True)
class MLA:
    q_lora_rank: int        # 0 = plain q_proj
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class Architecture:
    family: str
    vocab_size: int
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int            # q/k head width (MLA: nope + rope)
    v_head_dim: int
    rms_eps: float
    qkv_bias: bool
    o_bias: bool
    qk_norm: str             # "none" | "head" | "full"
    clip_qkv: float          # 0 = none
    windows: tuple           # per layer: 0 = full attention, else the sliding window
    rope: RopeSpec
    scale: float             # softmax scale
    tie_embeddings: bool
    max_position_embeddings: int
    mla: MLA = None


def _get(hf, key, where, default=None):
    value = hf.get(key, default)
    if value is None:
        raise FormatError(f"{where}: config key {key!r} is missing")
    return value


def _positive(value, key, where):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise FormatError(f"{where}: config key {key!r} must be a positive integer, got {value!r}")
    return value


def architecture(family, hf, where="config.json"):
    if not isinstance(hf, dict) or not hf:
        raise FormatError(f"{where}: no source config in the container (converted before whole-model support?)")
    check_config(hf, where)
    n_layers = _positive(_get(hf, "num_hidden_layers", where), "num_hidden_layers", where)
    hidden = _positive(_get(hf, "hidden_size", where), "hidden_size", where)
    n_heads = _positive(_get(hf, "num_attention_heads", where), "num_attention_heads", where)
    n_kv = _positive(hf.get("num_key_value_heads") or n_heads, "num_key_value_heads", where)
    if n_heads % n_kv:
        raise FormatError(f"{where}: num_attention_heads {n_heads} is not a multiple of num_key_value_heads {n_kv}")
    common = dict(family=family, vocab_size=_positive(_get(hf, "vocab_size", where), "vocab_size", where),
                  hidden=hidden, n_layers=n_layers, n_heads=n_heads,
                  rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
                  tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
                  max_position_embeddings=int(hf.get("max_position_embeddings") or 4096))
    if family == "deepseek_v3":
        return _deepseek(hf, where, common)
    head_dim = _positive(hf.get("head_dim") or hidden // n_heads, "head_dim", where)
    rope = rope_spec(hf, head_dim, where)
    qkv_bias = bool(hf.get("qkv_bias", True)) if family == "qwen2_moe" else bool(hf.get("attention_bias", False))
    o_bias = False if family == "qwen2_moe" else bool(hf.get("attention_bias", False))
    return Architecture(**common, n_kv_heads=n_kv, head_dim=head_dim, v_head_dim=head_dim, qkv_bias=qkv_bias,
                        o_bias=o_bias, qk_norm={"qwen3_moe": "head", "olmoe": "full"}.get(family, "none"),
                        clip_qkv=float(hf.get("clip_qkv") or 0.0) if family == "olmoe" else 0.0,
                        windows=_windows(family, hf, n_layers, where), rope=rope, scale=head_dim ** -0.5)


def _windows(family, hf, n_layers, where):
    window = hf.get("sliding_window")
    if family == "mixtral":
        return (int(window or 0),) * n_layers
    if family == "qwen3_moe":
        return (int(window or 0) if hf.get("use_sliding_window") else 0,) * n_layers
    if family == "qwen2_moe":
        types = hf.get("layer_types") or [
            "sliding_attention" if (i + 1) % 2 and i < hf.get("max_window_layers", 28) and hf.get("use_sliding_window")
            else "full_attention" for i in range(n_layers)]
        if len(types) != n_layers or set(types) - {"sliding_attention", "full_attention"}:
            raise FormatError(f"{where}: layer_types {types!r} must name full_attention/sliding_attention per layer")
        w = int(window or 0) if hf.get("use_sliding_window") else 0
        return tuple(w if t == "sliding_attention" else 0 for t in types)
    return (0,) * n_layers


def _deepseek(hf, where, common):
    mla = MLA(q_lora_rank=int(hf.get("q_lora_rank") or 0),
              kv_lora_rank=_positive(_get(hf, "kv_lora_rank", where), "kv_lora_rank", where),
              qk_nope_head_dim=_positive(_get(hf, "qk_nope_head_dim", where), "qk_nope_head_dim", where),
              qk_rope_head_dim=_positive(_get(hf, "qk_rope_head_dim", where), "qk_rope_head_dim", where),
              v_head_dim=_positive(_get(hf, "v_head_dim", where), "v_head_dim", where))
    rope = rope_spec(hf, mla.qk_rope_head_dim, where, interleaved=bool(hf.get("rope_interleave", True)))
    if rope.rot_dim != mla.qk_rope_head_dim:
        raise FormatError(f"{where}: partial rotary dims are not supported with MLA")
    head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    return Architecture(**common, n_kv_heads=1, head_dim=head_dim, v_head_dim=mla.v_head_dim,
                        qkv_bias=bool(hf.get("attention_bias", False)), o_bias=bool(hf.get("attention_bias", False)),
                        qk_norm="none", clip_qkv=0.0, windows=(0,) * common["n_layers"], rope=rope,
                        scale=head_dim ** -0.5 * softmax_mscale(rope), mla=mla)


def kv_row_dims(arch):
    """(K row width, V row width, values taken per V row) of the cache of one layer."""
    if arch.mla:
        width = arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim
        return width, width, arch.mla.kv_lora_rank
    return arch.head_dim, arch.head_dim, arch.head_dim
