"""routing.policy=balanced on the five oracle models (no Ray): exact when it never triggers, and a
measured, bounded change of outputs when it does."""
import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.routing.policy import BalancedRouting, forward_with_routing, measure_cosine, route_balanced

FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3")


def _skewed(model, layer, n, seed, strength=2.0):
    """Inputs leaning towards expert 0's router row, so expert 0 is over budget often."""
    rng = np.random.default_rng(seed)
    row = np.asarray(model.router(layer), np.float32)[0]
    return (rng.standard_normal((n, model.config.hidden)) + strength * row / np.linalg.norm(row)).astype(np.float32)


@pytest.mark.parametrize("family", FAMILIES)
def test_balanced_policy_is_exact_when_no_expert_is_over_budget(tiny_models, family):
    with cd.MoeExecutor(tiny_models[family], threads=1) as eng:
        layer = eng.model.moe_layers[-1]
        x = np.random.default_rng(2).standard_normal((48, eng.model.config.hidden)).astype(np.float32)
        idx_exact, w_exact = eng.route(layer, x)
        idx, w = route_balanced(BalancedRouting(threshold=1e9), eng, layer, x)
        assert np.array_equal(idx, idx_exact)
        assert np.allclose(w, w_exact, rtol=2e-6, atol=1e-7)
        # the forward used for the balanced policy is the MoeExecutor's own kernels: exact routing -> exact bits
        assert np.array_equal(forward_with_routing(eng, layer, x, idx_exact, w_exact), eng.moe_forward(layer, x))


@pytest.mark.parametrize("family", FAMILIES)
def test_balanced_policy_spreads_a_hot_expert_at_a_measured_cost(tiny_models, family):
    with cd.MoeExecutor(tiny_models[family], threads=1) as eng:
        layer = eng.model.moe_layers[-1]
        batches = [_skewed(eng.model, layer, 64, seed) for seed in range(3)]
        r = measure_cosine(eng, layer, batches, window=64, threshold=1.8)
    assert r["replaced_share"] > 0
    assert r["expert_imbalance_balanced"] < r["expert_imbalance_exact"]
    assert r["mean_cosine"] < 1.0  # it does change outputs (that is why it is opt-in)
    assert r["mean_cosine"] > 0.0
