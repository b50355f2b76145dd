"""The benchmark's cache simulator against hand-checked cases and Belady's bound."""
import pytest

from colibri_dist.bench.store import traces as st


def test_store_traces_belady_and_policies_small_case():
    seq_trace = [(0, [1]), (0, [2]), (0, [3]), (0, [1]), (0, [2]), (0, [3])]
    # capacity 2, cyclic reuse: LRU never hits; Belady: 1 2 miss, 3 evicts 2, 1 hit, 2 evicts 1, 3 hit
    assert st.belady_hits(st.accesses(seq_trace), 2) == 2
    sim = st.simulate(seq_trace, 2, "lru")
    assert sim["hit_rate"] == 0.0 and sim["loads_per_access"] == 1.0


def test_store_traces_policies_never_beat_belady():
    trace = st.zipf_trace(n_layers=2, n_experts=16, top_k=2, batch=2, steps=200, seed=3)
    rows = st.place_policies(trace, 32, (0.1, 0.25, 0.5))
    for r in rows:
        for p in ("lru", "lfu", "lfru"):
            assert r[p] <= r["belady"] + 1e-12
        assert 0.0 <= r["uniform"] <= 1.0


def test_store_traces_perfect_prefetch_hides_misses():
    trace = st.zipf_trace(n_layers=2, n_experts=16, top_k=2, batch=2, steps=100, seed=4)
    preds = [None] + trace[1:]                     # oracle lookahead
    sim = st.simulate(trace, 8, "lru", preds)
    plain = st.simulate(trace, 8, "lru")
    assert sim["hit_rate"] > plain["hit_rate"]
    assert plain["loads_per_access"] == pytest.approx(1.0 - plain["hit_rate"])
