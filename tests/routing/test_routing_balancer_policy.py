"""Opt-in balanced routing policy (no Ray, no model): over-budget experts give way to the next best."""
from types import SimpleNamespace

import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.routing.policy import BalancedRouting, cosine, gate_scores


def _hot_stream(n, h=8, n_exp=4, seed=0):
    rng = np.random.default_rng(seed)
    router = rng.standard_normal((n_exp, h)).astype(np.float32)
    x = (rng.standard_normal((n, h)) * 0.1 + router[0]).astype(np.float32)  # every token prefers expert 0
    return x, router


def test_over_budget_expert_is_replaced_by_the_next_best_candidate():
    x, router = _hot_stream(40)
    gating = SimpleNamespace(kind="softmax_topk_norm", top_k=1)
    sel, _ = gate_scores(x, router, gating)
    assert (sel.argmax(1) == 0).all()
    policy = BalancedRouting(window=4, threshold=1.5)
    idx, w = policy.route(0, x, router, gating)
    assert idx[0, 0] == 0  # empty buckets: the first token gets its best expert
    counts = np.bincount(idx[:, 0], minlength=4)
    assert 0 < counts[0] < 40 and policy.replaced == 40 - counts[0]
    assert np.array_equal(idx[:, 0], _reference_top1(sel, window=4, threshold=1.5))
    assert np.allclose(w, 1.0)  # top-1 renormalised


def _reference_top1(sel, window, threshold):
    """Plain restatement of the rule for top-1: best candidate whose recent mass <= threshold x mean."""
    history = {e: [] for e in range(sel.shape[1])}
    out = []
    for row in sel:
        sums = {e: sum(h[-window:]) for e, h in history.items()}
        cap = threshold * sum(sums.values()) / len(sums)
        order = list(np.argsort(-row, kind="stable"))
        pick = next((e for e in order if sums[e] <= cap), order[0])
        history[int(pick)].append(1.0)  # top-1 renormalised weight
        out.append(pick)
    return np.array(out)


def test_never_triggering_threshold_gives_exact_selection_and_weights():
    x, router = _hot_stream(30, seed=3)
    for kind in ("softmax_topk_norm", "softmax_topk"):
        gating = SimpleNamespace(kind=kind, top_k=2)
        idx, w = BalancedRouting(window=64, threshold=1e9).route(0, x, router, gating)
        sel, score = gate_scores(x, router, gating)
        top = np.argsort(-sel, axis=1, kind="stable")[:, :2]
        assert np.array_equal(idx, top)
        expect = np.take_along_axis(score, top, 1)
        if kind == "softmax_topk_norm":
            expect = expect / expect.sum(1, keepdims=True)
        assert np.allclose(w, expect, rtol=1e-6)


def test_sigmoid_group_gating_respects_group_limit_and_scaling():
    rng = np.random.default_rng(4)
    router = rng.standard_normal((8, 6)).astype(np.float32)
    x = rng.standard_normal((20, 6)).astype(np.float32)
    gating = SimpleNamespace(kind="sigmoid_group", top_k=2, n_group=4, topk_group=2, norm_topk_prob=True,
                             routed_scaling_factor=2.5)
    bias = (rng.random(8) * 0.1).astype(np.float32)
    idx, w = BalancedRouting(window=4, threshold=1.2).route(0, x, router, gating, bias)
    sel, _ = gate_scores(x, router, gating, bias)
    assert np.isfinite(sel[np.arange(20)[:, None], idx]).all()  # never an expert of a dropped group
    assert np.allclose(w.sum(1), 2.5, rtol=1e-6)


def test_policy_rejects_bad_settings_and_cosine_is_one_for_equal_outputs():
    with pytest.raises(InvalidArgument, match="window >= 1"):
        BalancedRouting(window=0)
    with pytest.raises(InvalidArgument, match="threshold > 0"):
        BalancedRouting(threshold=0)
    a = np.random.default_rng(0).standard_normal((5, 3))
    assert cosine(a, a) == pytest.approx(1.0)
    assert cosine(a, -a) == pytest.approx(-1.0)
