"""Numpy reference of the three gating kinds, written the way transformers 5.x computes them.

Role: the readable definition the C core (native/src/gating.c) is tested
against, and a reference for anyone checking routing decisions. Unlike the C
core (top-k on raw logits, only winners exponentiated) this follows the
transformers order literally: softmax over all experts, then top-k, then
optional renormalisation. Ties go to the lower expert index (stable sort).
"""
import numpy as np


def _topk(scores, k):
    order = np.argsort(-scores, axis=-1, kind="stable")[..., :k]
    return order.astype(np.int32), np.take_along_axis(scores, order, axis=-1)


def softmax(logits):
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z, dtype=np.float32)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def route_reference(logits, gating, bias=None):
    """logits float32 [n, E] + native.Gating (or anything with its fields) -> (idx int32 [n,k], w float32 [n,k])."""
    logits = np.asarray(logits, dtype=np.float32)
    k = gating.top_k
    if gating.kind in ("softmax_topk_norm", "softmax_topk"):
        idx, w = _topk(softmax(logits), k)
        if gating.kind == "softmax_topk_norm":
            w = w / w.sum(axis=-1, keepdims=True)
        return idx, w.astype(np.float32)
    if gating.kind != "sigmoid_group":
        raise ValueError(f"unknown gating kind {gating.kind!r}")
    return _sigmoid_group(logits, gating, bias)


def _sigmoid_group(logits, g, bias):
    n, E = logits.shape
    scores = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    choice = scores + (np.zeros(E, np.float32) if bias is None else np.asarray(bias, np.float32))
    gsz = E // g.n_group
    grouped = choice.reshape(n, g.n_group, gsz)
    top2 = -np.sort(-grouped, axis=-1)[..., :min(2, gsz)]
    group_scores = top2.sum(axis=-1)
    keep_groups, _ = _topk(group_scores, g.topk_group)
    mask = np.zeros((n, g.n_group), dtype=bool)
    np.put_along_axis(mask, keep_groups, True, axis=-1)
    masked = np.where(np.repeat(mask, gsz, axis=-1), choice, -np.inf).astype(np.float32)
    idx, _ = _topk(masked, g.top_k)
    w = np.take_along_axis(scores, idx, axis=-1)
    if g.norm_topk_prob:
        w = w / (w.sum(axis=-1, keepdims=True) + np.float32(1e-20))
    return idx, (w * np.float32(g.routed_scaling_factor)).astype(np.float32)
