"""C gating vs the numpy reference (routing/gating.py) and vs the transformers routers; ties to the lower index."""
import numpy as np
import pytest

from colibri_dist.native import Gating, Runtime, gate_logits
from colibri_dist.routing.gating import route_reference

CASES = [
    Gating("softmax_topk_norm", 8, 2), Gating("softmax_topk_norm", 64, 8), Gating("softmax_topk", 60, 4),
    Gating("softmax_topk", 128, 8),
    Gating("sigmoid_group", 16, 4, n_group=4, topk_group=2, routed_scaling_factor=2.5),
    Gating("sigmoid_group", 256, 8, n_group=8, topk_group=4, routed_scaling_factor=2.5),
    Gating("sigmoid_group", 32, 6, n_group=1, topk_group=1, norm_topk_prob=False, routed_scaling_factor=1.5),
]


@pytest.mark.parametrize("g", CASES, ids=lambda g: f"{g.kind}-E{g.n_experts}-k{g.top_k}-G{g.n_group}")
def test_gate_logits_matches_numpy_reference(g):
    rng = np.random.default_rng(g.n_experts + g.top_k)
    logits = (rng.standard_normal((300, g.n_experts)) * 2).astype(np.float32)
    bias = (rng.standard_normal(g.n_experts) * 0.3).astype(np.float32) if g.kind == "sigmoid_group" else None
    idx, w = gate_logits(logits, g, bias)
    ridx, rw = route_reference(logits, g, bias)
    assert np.array_equal(idx, ridx)
    np.testing.assert_allclose(w, rw, rtol=2e-6, atol=1e-7)


def test_ties_go_to_the_lower_expert_index():
    logits = np.array([[1, 3, 3, 0, 3, 2], [5, 5, 5, 5, 5, 5]], np.float32)
    idx, w = gate_logits(logits, Gating("softmax_topk_norm", 6, 2))
    assert idx.tolist() == [[1, 2], [0, 1]]
    np.testing.assert_allclose(w, 0.5)
    idx, _ = gate_logits(logits, Gating("softmax_topk", 6, 4))
    assert idx.tolist() == [[1, 2, 4, 5], [0, 1, 2, 3]]
    g = Gating("sigmoid_group", 6, 2, n_group=3, topk_group=1)
    idx, _ = gate_logits(np.zeros((1, 6), np.float32), g)     # all groups tie -> group 0 -> experts 0, 1
    assert idx.tolist() == [[0, 1]]


def test_route_applies_router_in_kernel_order_and_matches_reference():
    rng = np.random.default_rng(2)
    g = Gating("softmax_topk", 64, 8)
    x = rng.standard_normal((50, 96)).astype(np.float32)
    router = rng.standard_normal((64, 96)).astype(np.float32)
    with Runtime(threads=2) as rt:
        idx, w = rt.route(x, router, g)
    ridx, rw = route_reference((x.astype(np.float64) @ router.T.astype(np.float64)).astype(np.float32), g)
    assert (idx == ridx).mean() > 0.99           # float32 vs float64 logits may flip near-ties
    same = (idx == ridx).all(axis=1)
    np.testing.assert_allclose(w[same], rw[same], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3"])
def test_route_matches_transformers_router(family):
    import torch
    from native_helpers import hf_block, hf_weights
    block, gating = hf_block(family, seed=5)
    _, router, bias, _, _ = hf_weights(block, family)
    x = np.random.default_rng(6).standard_normal((64, router.shape[1])).astype(np.float32)
    with torch.no_grad():
        _, tw, ti = block.gate(torch.from_numpy(x))
    ti, tw = ti.numpy(), tw.float().numpy()
    order = np.argsort(-tw, axis=1, kind="stable")             # DeepSeek's topk is unsorted
    ti, tw = np.take_along_axis(ti, order, 1), np.take_along_axis(tw, order, 1)
    with Runtime(threads=1) as rt:
        idx, w = rt.route(x, router, gating, bias=bias)
    if family == "deepseek_v3":                                  # sort ours by weight too (selection order is by biased score)
        o2 = np.argsort(-w, axis=1, kind="stable")
        idx, w = np.take_along_axis(idx, o2, 1), np.take_along_axis(w, o2, 1)
    assert np.array_equal(idx, ti)
    np.testing.assert_allclose(w, tw, rtol=1e-5, atol=1e-6)
