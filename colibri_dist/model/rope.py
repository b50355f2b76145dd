"""Rotary position embedding parameters: inverse frequencies and the cos/sin scale, per rope type.

Role in the data flow: arch.py reads a checkpoint config's `rope_parameters` (transformers >= 5)
or legacy `rope_theta`/`rope_scaling` and calls rope_spec(); the decoder hands the result to the
native cb_rope_apply. The formulas follow transformers' modeling_rope_utils (default, linear and
yarn, with float32 rounding where it rounds); any other type is refused naming the key.
"""
import math
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError

SUPPORTED = ("default", "linear", "yarn")


@dataclass(frozen=True)
class RopeSpec:
    rot_dim: int                 # rotated dims per head (even)
    inv_freq: np.ndarray         # float32 [rot_dim // 2]
    attention_factor: float      # cos/sin multiplier (yarn), 1.0 otherwise
    interleaved: bool            # DeepSeek rope_interleave layout
    rope_type: str
    params: dict                 # the resolved parameters (for the softmax mscale of DeepSeek)


def rope_parameters(hf):
    """The rope parameter dict of a config.json, whichever spelling it uses."""
    params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    if "type" in params and "rope_type" not in params:
        params["rope_type"] = params.pop("type")
    params.setdefault("rope_type", "default")
    params.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    return params


def rope_spec(hf, head_dim, where="config.json", interleaved=False):
    params = rope_parameters(hf)
    kind = params["rope_type"]
    if kind not in SUPPORTED:
        raise FormatError(f"{where}: rope_parameters.rope_type {kind!r} is not supported "
                          f"(supported: {', '.join(SUPPORTED)})")
    base = float(params["rope_theta"])
    dim = int(head_dim * float(params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))))
    if dim <= 0 or dim % 2 or dim > head_dim:
        raise FormatError(f"{where}: rotary dims {dim} of head_dim {head_dim} must be even and positive")
    exponents = (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)).astype(np.float32)
    pos_freqs = np.power(np.float32(base), exponents, dtype=np.float32)
    factor_attn = 1.0
    if kind == "default":
        inv = (np.float32(1.0) / pos_freqs).astype(np.float32)
    elif kind == "linear":
        inv = ((np.float32(1.0) / pos_freqs) / np.float32(_need(params, "factor", where))).astype(np.float32)
    else:
        inv, factor_attn = _yarn(hf, params, dim, base, pos_freqs, where)
    return RopeSpec(dim, np.ascontiguousarray(inv, dtype=np.float32), float(factor_attn), bool(interleaved), kind, params)


def _need(params, key, where):
    if params.get(key) is None:
        raise FormatError(f"{where}: rope_parameters.{key} is required for rope_type {params['rope_type']!r}")
    return params[key]


def yarn_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(hf, params, dim, base, pos_freqs, where):
    orig = int(_need(params, "original_max_position_embeddings", where))
    factor = params.get("factor")
    if factor is None:
        factor = hf.get("max_position_embeddings", orig) / orig
    factor = float(factor)
    attention = params.get("attention_factor")
    mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
    if attention is None:
        attention = (yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all)) if mscale and mscale_all \
            else yarn_mscale(factor)
    beta_fast, beta_slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1)
    extrapolation = (np.float32(1.0) - ramp.astype(np.float32)).astype(np.float32)
    inv_extra = (np.float32(1.0) / pos_freqs).astype(np.float32)
    inv_inter = (np.float32(1.0) / (np.float32(factor) * pos_freqs)).astype(np.float32)
    inv = inv_inter * (np.float32(1.0) - extrapolation) + inv_extra * extrapolation
    return inv.astype(np.float32), float(attention)


def softmax_mscale(spec):
    """DeepSeek's extra softmax scale factor (mscale_all_dim under yarn), 1.0 otherwise."""
    p = spec.params
    if p.get("rope_type", "default") != "default" and p.get("mscale_all_dim"):
        m = yarn_mscale(float(p["factor"]), float(p["mscale_all_dim"]))
        return m * m
    return 1.0
