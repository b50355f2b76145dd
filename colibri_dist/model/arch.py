"""Architecture: what the decoder needs to know about a model beyond its MoE layers.

Role in the data flow: built once per LLM from the container's `source_config` (the checkpoint's
config.json, kept in the metadata) and family. The common keys (sizes, heads, norms eps, rope via
rope.py, softmax scale) are read here; the family's table entry (colibri_dist/families/) decides the
rest: attention kind (GQA or MLA), q/k/v and o biases, QK-norm placement ("head" or "full"),
clip_qkv, per-layer sliding windows, attention sinks, and the tensor names. What the engine does not run is refused
with a FormatError naming the key.
"""
from dataclasses import dataclass

from .. import families
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
    names: families.Names = families.Names()   # the decoder's tensor names (model/weights.py)
    sinks: bool = False      # per-head attention sinks ({attn}.sinks [n_heads], weights.py loads them)


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
    entry = families.get(family, where)
    common["names"] = entry.names
    feats = entry.attention(hf, n_layers, where)
    if feats.mla:
        return _mla(hf, where, common, feats)
    head_dim = _positive(hf.get("head_dim") or hidden // n_heads, "head_dim", where)
    windows = feats.windows or (0,) * n_layers
    if len(windows) != n_layers:
        raise FormatError(f"{where}: {len(windows)} attention windows for {n_layers} layers")
    return Architecture(**common, n_kv_heads=n_kv, head_dim=head_dim, v_head_dim=head_dim, qkv_bias=feats.qkv_bias,
                        o_bias=feats.o_bias, qk_norm=feats.qk_norm, clip_qkv=feats.clip_qkv, windows=tuple(windows),
                        rope=rope_spec(hf, head_dim, where), scale=head_dim ** -0.5, sinks=feats.sinks)


def _mla(hf, where, common, feats):
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
                        qkv_bias=feats.qkv_bias, o_bias=feats.o_bias, qk_norm="none", clip_qkv=0.0,
                        windows=(0,) * common["n_layers"], rope=rope, scale=head_dim ** -0.5 * softmax_mscale(rope),
                        mla=mla)


def kv_row_dims(arch):
    """(K row width, V row width, values taken per V row) of the cache of one layer."""
    if arch.mla:
        width = arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim
        return width, width, arch.mla.kv_lora_rank
    return arch.head_dim, arch.head_dim, arch.head_dim
