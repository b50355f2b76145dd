"""Type checks of a checkpoint's config.json values, at convert and again at load.

Role in the data flow: convert.py calls check_config(hf) before a byte is written, and
model/arch.py calls it on the container's stored `source_config` before building an
Architecture, so a typo'd value (`"128k"`, `"none"` where a number belongs, `"yes"` for a
flag) or an activation the native FFN does not compute is a FormatError naming the key and
the value, never a raw ValueError at load or a silent wrong result. One table, read both ways; a key
only one family reads is declared in that family's entry (`values`, colibri_dist/families/) and joins it.
"""
import math

from .. import families
from ..errors import FormatError

# kind: "int" (integer), "float" (any finite number), "bool" (true/false), "?" suffix = null allowed
VALUES = {
    "vocab_size": "int", "hidden_size": "int", "intermediate_size": "int", "moe_intermediate_size": "int",
    "num_hidden_layers": "int", "num_attention_heads": "int", "num_key_value_heads": "int?",
    "head_dim": "int?", "max_position_embeddings": "int?", "sliding_window": "int?", "max_window_layers": "int?",
    "num_experts": "int?", "num_local_experts": "int?", "n_routed_experts": "int?", "num_experts_per_tok": "int?",
    "shared_expert_intermediate_size": "int?", "decoder_sparse_step": "int?", "n_group": "int?",
    "topk_group": "int?", "first_k_dense_replace": "int?", "n_shared_experts": "int?", "q_lora_rank": "int?",
    "kv_lora_rank": "int?", "qk_nope_head_dim": "int?", "qk_rope_head_dim": "int?", "v_head_dim": "int?",
    "rms_norm_eps": "float", "rope_theta": "float?", "partial_rotary_factor": "float?",
    "routed_scaling_factor": "float?", "clip_qkv": "float?",
    "norm_topk_prob": "bool?", "tie_word_embeddings": "bool?", "use_sliding_window": "bool?",
    "attention_bias": "bool?", "qkv_bias": "bool?", "rope_interleave": "bool?",
}
# the keys only some family reads, declared in its table entry (colibri_dist/families/<model_type>.py)
VALUES.update({key: kind for fam in families.FAMILIES.values() for key, kind in fam.values.items()})
ROPE_VALUES = {"rope_theta": "float?", "factor": "float?", "original_max_position_embeddings": "int?",
               "attention_factor": "float?", "beta_fast": "float?", "beta_slow": "float?", "mscale": "float?",
               "mscale_all_dim": "float?", "partial_rotary_factor": "float?", "truncate": "bool?"}
# what a value must also be, beyond its type (checked when present and not null): a value outside these
# converted "successfully" and failed only at load without naming the key, or overflowed float32 there
RANGES = {
    "rms_norm_eps": (lambda v: 0 < v < 1, "in (0, 1)"),
    "partial_rotary_factor": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "routed_scaling_factor": (lambda v: 0 < v <= 1e4, "in (0, 10000]"),
    "rope_theta": (lambda v: 0 < v <= 1e12, "in (0, 1e12]"),
    "clip_qkv": (lambda v: 0 < v <= 1e4, "in (0, 10000]"),
    "head_dim": (lambda v: v > 0 and v % 2 == 0, "a positive even integer (rotary pairs)"),
    "qk_rope_head_dim": (lambda v: v > 0 and v % 2 == 0, "a positive even integer (rotary pairs)"),
}
# The native FFN computes down(act(gate(x)) * up(x)) with act = SiLU only (native/src/ffn.c).
ACTIVATIONS = ("silu", "swish")
_EXPECT = {"int": "an integer", "float": "a finite number", "bool": "true or false"}


def _fits(value, kind):
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int)
    return isinstance(value, (int, float)) and math.isfinite(value)


def _check(table, values, where, prefix=""):
    for key, kind in table.items():
        if key not in values:
            continue
        value, base = values[key], kind.rstrip("?")
        if value is None and kind.endswith("?"):
            continue
        if not _fits(value, base):
            raise FormatError(f"{where}: config key '{prefix}{key}' must be {_EXPECT[base]}, got {value!r}")
        ok, what = RANGES.get(key, (None, None))
        if ok is not None and not ok(value):
            raise FormatError(f"{where}: config key '{prefix}{key}' must be {what}, got {value!r}")


def check_config(hf, where="config.json"):
    """FormatError naming the key unless every known value has its type and the activation is SiLU."""
    if not isinstance(hf, dict):
        raise FormatError(f"{where}: the model config must be a JSON object, got {type(hf).__name__}")
    _check(VALUES, hf, where)
    for key in ("rope_parameters", "rope_scaling"):
        params = hf.get(key)
        if params is None:
            continue
        if not isinstance(params, dict):
            raise FormatError(f"{where}: config key {key!r} must be an object, got {params!r}")
        _check(ROPE_VALUES, params, where, prefix=f"{key}.")
    _check_layers(hf, where)
    act = hf.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise FormatError(f"{where}: config key 'hidden_act' is {act!r}; colibri's FFN computes "
                          f"{' / '.join(ACTIVATIONS)} only, so this model cannot run correctly")


def _check_layers(hf, where):
    """A MoE model keeps experts in some layer: first_k_dense_replace at or past the last layer converted
    "successfully" with every expert dropped."""
    k, n = hf.get("first_k_dense_replace"), hf.get("num_hidden_layers")
    if isinstance(k, int) and isinstance(n, int) and not isinstance(k, bool) and k >= n > 0:
        raise FormatError(f"{where}: config key 'first_k_dense_replace' is {k}, not below num_hidden_layers {n}: "
                          f"no layer would keep its experts")
