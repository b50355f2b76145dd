"""Typed reads of config.json values for the family builders, each failure a FormatError naming the key.

Role in the data flow: the MoE and attention builders of every family file call these on the parsed
config.json (at convert, and again on the container's stored source_config at load), so a missing or
mistyped key is refused the same way whatever the family.
"""
from ..errors import FormatError


def need(hf, key, default=None):
    """hf[key] as a positive integer (key may be a tuple of aliases, first present wins), else default,
    else FormatError naming the key."""
    keys = key if isinstance(key, tuple) else (key,)
    value = next((hf[k] for k in keys if hf.get(k) is not None), default)
    if value is None:
        raise FormatError(f"config.json: missing key {keys[0]!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise FormatError(f"config.json: {keys[0]!r} must be a positive integer, got {value!r}")
    return value


def number(hf, key, default):
    value = hf.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FormatError(f"config.json: {key!r} must be a number, got {value!r}")
    return float(value)


def non_negative(hf, key, default):
    value = hf.get(key, default) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FormatError(f"config.json: {key!r} must be a non-negative integer, got {value!r}")
    return value


def layer_list(hf, key):
    value = hf.get(key) or []
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise FormatError(f"config.json: {key!r} must be a list of layer indices, got {value!r}")
    return set(value)


def softmax_kind(norm):
    """The softmax gating kind of a norm_topk_prob flag."""
    return "softmax_topk_norm" if norm else "softmax_topk"
