"""Replica balancers (no Ray): token-bucket window, threshold and fallback; round-robin; home."""
import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.routing.balancer import (HomeBalancer, RoundRobinBalancer, TokenBucketBalancer,
                                           make_balancer)
from colibri_dist.routing.placement import plan


def test_token_bucket_picks_replica_with_smallest_recent_mass_ties_to_replica_order():
    b = TokenBucketBalancer(3, window=8, threshold=100.0)
    b.record("e", 0, 5.0)
    b.record("e", 1, 2.0)
    picks = [b.choose("e", [0, 1], 1.0) for _ in range(4)]
    # expert e's ring on worker 1 grows 2->3->4->5; at 5 vs 5 the tie goes to the first replica (0)
    assert picks == [1, 1, 1, 0]
    assert b.bucket("e", 0) == pytest.approx(6.0) and b.bucket("e", 1) == pytest.approx(5.0)
    assert b.load(0) == pytest.approx(6.0) and b.load(2) == 0.0


def test_rings_are_per_expert_so_each_expert_spreads_over_its_own_replicas():
    b = TokenBucketBalancer(2, window=8, threshold=100.0)
    b.record("a", 0, 5.0)  # worker 0 is busy with expert a ...
    b.record("c", 1, 4.0)  # (and worker 1 with c, so neither is over the max/min cap)
    assert b.choose("b", [0, 1], 1.0) == 0  # ... but b's own rings are empty: tie -> first replica
    assert b.choose("b", [0, 1], 1.0) == 1  # then b alternates by its own recent mass
    assert b.bucket("a", 1) == 0.0 and b.load(0) == pytest.approx(6.0)


def test_token_bucket_window_forgets_old_assignments():
    b = TokenBucketBalancer(2, window=2, threshold=100.0)
    b.record("e", 0, 10.0)
    b.record("e", 0, 1.0)
    assert b.bucket("e", 0) == pytest.approx(11.0)
    b.record("e", 0, 1.0)  # the 10.0 falls out of the 2-slot window
    assert b.bucket("e", 0) == pytest.approx(2.0) and b.load(0) == pytest.approx(2.0)
    for _ in range(1000):  # running sums stay exact over many laps
        b.record("e", 0, 0.1)
    assert b.bucket("e", 0) == pytest.approx(0.2) and b.load(0) == pytest.approx(0.2)


def test_token_bucket_skips_workers_over_threshold_and_falls_back_to_least_loaded():
    b = TokenBucketBalancer(3, window=4, threshold=1.8)
    b.record("x", 1, 9.0)
    b.record("y", 2, 3.0)  # worker loads 0, 9, 3: mean 4, cap 1.8*3/3.8 x 4 = 5.7 -> worker 1 is over
    assert b.choose("e", [1, 2], 0.5) == 2  # e's buckets tie; worker 1 is skipped
    assert b.choose("f", [1], 0.5) == 0  # the only replica is over the cap -> least loaded live worker
    assert b.fallbacks == 1
    loose = TokenBucketBalancer(3, window=4, threshold=10.0)
    loose.record("x", 1, 9.0)
    loose.record("y", 2, 3.0)  # cap = 10*3/12 x 4 = 10: worker 1 is allowed
    assert loose.choose("f", [1], 0.5) == 1
    assert loose.fallbacks == 0


def test_dead_workers_are_skipped_and_any_live_worker_covers_an_expert_with_no_live_replica():
    b = TokenBucketBalancer(3)
    b.mark_dead(0)
    assert b.choose("e", [0, 1], 1.0) == 1
    b.mark_dead(1)
    assert b.choose("e", [0, 1], 1.0) == 2
    b.mark_alive(0)
    assert b.choose("e", [0, 1], 1.0) == 0
    b.mark_dead(0)
    b.mark_dead(2)
    with pytest.raises(InvalidArgument, match="no live worker"):
        b.choose("e", [0], 1.0)


def test_round_robin_cycles_through_replicas_and_home_sticks_to_the_first():
    rr = RoundRobinBalancer(3)
    assert [rr.choose("e", [0, 2], 1.0) for _ in range(3)] == [0, 2, 0]
    home = HomeBalancer(3)
    assert [home.choose("e", [2, 0], 1.0) for _ in range(3)] == [2, 2, 2]
    home.mark_dead(2)
    assert home.choose("e", [2, 0], 1.0) == 0


def test_assign_places_heavier_units_first_and_spreads_chunks_of_one_expert():
    b = TokenBucketBalancer(2, threshold=100.0)
    out = b.assign({("e", 0): (2.0, 4), ("e", 1): (2.0, 4), ("f", 0): (5.0, 7)}, lambda k: [0, 1],
                   expert_of=lambda k: k[0])
    assert out[("f", 0)] == 0  # heaviest first
    assert {out[("e", 0)], out[("e", 1)]} == {0, 1}  # e's chunks land on both of its replicas
    assert sum(b.assigned_rows) == 15


def test_make_balancer_accepts_config_mapping_and_rejects_bad_options():
    b = make_balancer({"kind": "token-bucket", "window": 16, "threshold": 2.5}, 4)
    assert (b.window, b.threshold, b.n_workers) == (16, 2.5, 4)
    assert make_balancer("round-robin", 2).kind == "round-robin"
    assert make_balancer({"kind": "home"}, 2).kind == "home"
    with pytest.raises(InvalidArgument, match="unknown balancer 'fastest'"):
        make_balancer("fastest", 2)
    with pytest.raises(InvalidArgument, match="windw"):
        make_balancer({"kind": "token-bucket", "windw": 3}, 2)
    with pytest.raises(InvalidArgument, match="window"):
        make_balancer({"window": 0}, 2)
    with pytest.raises(InvalidArgument, match="threshold"):
        make_balancer({"threshold": -1}, 2)
    with pytest.raises(InvalidArgument, match="at least one worker"):
        make_balancer("home", 0)


def _imbalance(kind, loads_per_batch, placement):
    b = make_balancer(kind, placement.n_workers)
    rows = np.zeros(placement.n_workers)
    for batch in loads_per_batch:
        for e, w in b.assign(batch, lambda e: placement.replicas_of((0, e))).items():
            rows[w] += batch[e][1]
    return rows.max() / rows.mean()


def test_token_bucket_spreads_zipf_skewed_load_better_than_home_only():
    rng = np.random.default_rng(0)
    n_exp, n_workers = 16, 4
    p = 1.0 / np.arange(1, n_exp + 1) ** 1.2
    p /= p.sum()
    batches = []
    for _ in range(50):
        counts = np.bincount(rng.choice(n_exp, size=256, p=p), minlength=n_exp)
        batches.append({e: (float(c) / 2, int(c)) for e, c in enumerate(counts) if c})
    placement = plan({0: range(n_exp)}, n_workers, replicas=8,
                     loads={0: {e: float(p[e]) for e in range(n_exp)}})
    tb = _imbalance("token-bucket", batches, placement)
    home = _imbalance("home", batches, placement)
    assert tb < home
    assert tb < 1.25


def test_cap_tightens_as_the_pool_shrinks_and_bounds_a_two_worker_batch():
    b = TokenBucketBalancer(2, threshold=1.3)
    assert abs(b.cap_factor(2) - 2.6 / 2.3) < 1e-12
    assert b.cap_factor(2) < b.cap_factor(8) < 1.3
    # every unit homed on worker 0 (the demo's skew): the bound sends the overflow to worker 1,
    # and an expert that spilled once keeps spilling to the same worker (its cache stays warm)
    units = {e: (float(r), r) for e, r in enumerate([40, 30, 20, 10, 10, 10, 5, 5])}
    out = b.assign(units, lambda e: [0])
    rows = np.bincount([out[e] for e in units], weights=[units[e][1] for e in units], minlength=2)
    assert rows.max() / rows.mean() <= b.cap_factor(2)
    spilled = {e for e, w in out.items() if w == 1}
    again = b.assign(units, lambda e: [0])
    assert {e for e, w in again.items() if w == 1} & spilled


def test_assign_among_a_subset_keeps_every_unit_on_it_and_bounds_it():
    b = TokenBucketBalancer(4, threshold=1.3)
    units = {e: (1.0, r) for e, r in enumerate([9, 7, 5, 5, 3, 2])}
    out = b.assign(units, lambda e: [e % 4], among=[1, 3])  # homes 0..3, only workers 1 and 3 may run
    assert set(out.values()) <= {1, 3}
    rows = {w: sum(units[e][1] for e in out if out[e] == w) for w in (1, 3)}
    assert max(rows.values()) / (sum(rows.values()) / 2) <= b.cap_factor(2) + 1e-9
    rr = RoundRobinBalancer(4)
    assert set(rr.assign(units, lambda e: [e % 4], among=[2]).values()) == {2}
