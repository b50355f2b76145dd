"""Checks and packing for a hot-added expert (ExpertStore.add_expert).

Role in the data flow: user weights (float32 gate/up/down, the expert biases when the layer's experts have
them (gpt-oss), router row, bias)
are validated against the layer (shapes, finite, |w| <= MAX_ABS_WEIGHT), packed in the layer's encodings by the same
packer the converter uses, and checked to have the layer's exact blob layout,
so the kernels and every tier treat the new expert like a converted one.
"""
import numpy as np

from ..errors import InvalidArgument, StoreError

MAX_ABS_WEIGHT = 65504.0      # largest float16: far above any trained weight, far below overflow


def _matrix(weights, name, shape, layer):
    if not isinstance(weights, dict) or name not in weights:
        raise InvalidArgument(f"add_expert(layer {layer}): weights must be a dict with 'gate', 'up', 'down'")
    m = np.asarray(weights[name])
    if m.shape != shape:
        raise InvalidArgument(f"add_expert(layer {layer}): weights[{name!r}] has shape {m.shape}, expected {shape}")
    if not np.issubdtype(m.dtype, np.floating):
        raise InvalidArgument(f"add_expert(layer {layer}): weights[{name!r}] must be floating point, got {m.dtype}")
    m = np.ascontiguousarray(m, dtype=np.float32)
    if not np.isfinite(m).all():
        raise InvalidArgument(f"add_expert(layer {layer}): weights[{name!r}] contains NaN or Inf")
    _bounded(m, f"weights[{name!r}]", layer)
    return m


def _bounded(m, what, layer):
    """Finite is not enough: 3e38 overflows the first dot product. Refuse values past MAX_ABS_WEIGHT."""
    peak = float(np.abs(m).max()) if m.size else 0.0
    if peak > MAX_ABS_WEIGHT:
        raise InvalidArgument(f"add_expert(layer {layer}): {what} has magnitude {peak:g} > {MAX_ABS_WEIGHT:g} "
                              f"(the float16 range; larger weights overflow float32 sums)")


def _biases(weights, layout, layer):
    """The expert biases (gate_bias, up_bias, down_bias) a layer with biased experts needs (gpt-oss)."""
    names = ("gate_bias", "up_bias", "down_bias")
    if layout.biases is None:
        if any(n in weights for n in names):
            raise InvalidArgument(f"add_expert(layer {layer}): this model's experts have no biases; "
                                  f"drop {[n for n in names if n in weights]}")
        return None
    if not all(n in weights for n in names):
        raise InvalidArgument(f"add_expert(layer {layer}): this model's experts have biases: weights needs "
                              f"'gate_bias', 'up_bias' and 'down_bias'")
    return [_matrix(weights, n, (size,), layer) for n, size in zip(names, (layout.inter, layout.inter,
                                                                           layout.hidden))]


def pack_new_expert(model, layout, layer, weights, router_row, bias):
    hidden, inter = layout.hidden, layout.inter
    gate = _matrix(weights, "gate", (inter, hidden), layer)
    up = _matrix(weights, "up", (inter, hidden), layer)
    down = _matrix(weights, "down", (hidden, inter), layer)
    biases = _biases(weights, layout, layer)
    row = np.asarray(router_row)
    if row.shape != (hidden,) or not np.issubdtype(row.dtype, np.number) or not np.isfinite(row).all():
        raise InvalidArgument(f"add_expert(layer {layer}): router_row must be {hidden} finite floats, "
                              f"got shape {row.shape}")
    _bounded(row.astype(np.float64), "router_row", layer)
    if abs(float(bias)) > MAX_ABS_WEIGHT:
        raise InvalidArgument(f"add_expert(layer {layer}): bias {bias!r} is larger than {MAX_ABS_WEIGHT:g}")
    if not np.isfinite(float(bias)):
        raise InvalidArgument(f"add_expert(layer {layer}): bias must be finite, got {bias!r}")
    from ..format.convert import pack
    blob, new_layout = pack(gate, up, down, layout.schemes, biases, layout.act)   # the layer's encodings
    if new_layout != layout:
        raise StoreError(f"add_expert(layer {layer}): packed layout differs from the layer's experts "
                         f"({new_layout} vs {layout})")
    return blob, new_layout
