"""The router a layer routes with once experts were hot-added or removed.

Role in the data flow: the engine (and pool router) route with
`table.router` [n_visible, h], `table.bias`, `table.gating`, then map the
kernel's compact indices back to expert ids with `table.ids`. Added experts
append rows (their id = base count + order of addition); removed experts drop
out of the compact set, which is exact: softmax over the remaining logits and
sigmoid scores do not depend on a removed expert's row. Group-limited gating
(n_group > 1) ties experts to fixed groups, so it refuses add/remove.
"""
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgument


@dataclass(frozen=True)
class RoutingTable:
    layer: int
    router: np.ndarray        # float32 [n_visible, hidden], C-contiguous
    bias: object              # float32 [n_visible] or None
    gating: object            # native.Gating with n_experts = n_visible
    ids: np.ndarray           # int32 [n_visible]: compact index -> expert id
    identity: bool            # ids == arange(n_experts): no remapping needed
    version: int


def build_table(model, segments, layer, make_gating):
    base_router = np.asarray(model.router(layer), dtype=np.float32)
    base_bias = model.correction_bias(layer)
    added = segments.added(layer) if segments is not None else []
    removed = segments.removed(layer) if segments is not None else set()
    rows = [base_router] + [segments.router_row(layer, e)[None, :] for e in added]
    router = np.concatenate(rows) if added else base_router
    bias = None
    if base_bias is not None:
        bias = np.concatenate([np.asarray(base_bias, np.float32),
                               np.array([segments.bias(layer, e) for e in added], np.float32)])
    n_total = router.shape[0]
    ids = np.array([e for e in range(n_total) if e not in removed], dtype=np.int32)
    identity = len(ids) == n_total
    if not identity:
        router = router[ids]
        bias = None if bias is None else bias[ids]
    g = model.config.gating
    if g.n_group > 1 and (added or removed):
        raise InvalidArgument(f"layer {layer}: hot-added/removed experts are not supported with "
                              f"group-limited gating (n_group={g.n_group})")
    gating = make_gating(g.kind, len(ids), g.top_k, n_group=g.n_group, topk_group=g.topk_group,
                         norm_topk_prob=g.norm_topk_prob, routed_scaling_factor=g.routed_scaling_factor)
    return RoutingTable(layer, np.ascontiguousarray(router), None if bias is None else np.ascontiguousarray(bias),
                        gating, ids, identity, segments.version if segments is not None else 0)
