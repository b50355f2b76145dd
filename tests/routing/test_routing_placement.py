"""Home placement, EPLB-style replica greedy and load metering (no Ray)."""
import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.routing.placement import LoadMeter, pack_layer, plan, replica_counts


def test_replica_counts_follow_largest_load_per_copy_and_cap_at_worker_count():
    assert replica_counts([10, 1, 1, 1], 4, 3).tolist() == [4, 1, 1, 1]
    assert replica_counts([10, 1, 1, 1], 4, 4).tolist() == [4, 2, 1, 1]
    assert replica_counts([6, 5, 1], 4, 1).tolist() == [2, 1, 1]
    assert replica_counts([1, 1], 2, 10).tolist() == [2, 2]  # every expert on every worker
    with pytest.raises(InvalidArgument):
        replica_counts([1], 2, -1)


def test_packing_balances_expected_load_largest_first():
    holders, worker_load = pack_layer([0, 1, 2, 3, 4, 5], [4, 3, 3, 2, 2, 2], [1] * 6, 2)
    assert worker_load == [8.0, 8.0]
    assert holders == {0: [0], 1: [1], 2: [1], 3: [0], 4: [0], 5: [1]}


def test_uniform_plan_spreads_homes_evenly_per_layer():
    p = plan({1: range(8), 3: range(8)}, 4)
    for layer in (1, 3):
        homes = [p.home((layer, e)) for e in range(8)]
        assert sorted(np.bincount(homes, minlength=4).tolist()) == [2, 2, 2, 2]
    assert all(len(p.replicas_of(k)) == 1 for k in p.replicas)


def test_replicas_go_to_hot_experts_on_distinct_workers():
    loads = {0: {0: 100.0, 1: 50.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0}}
    p = plan({0: range(6)}, 3, loads=loads, replicas=3)
    copies = {e: p.replicas_of((0, e)) for e in range(6)}
    assert sum(len(ws) for ws in copies.values()) == 6 + 3
    assert [len(copies[e]) for e in range(6)] == [3, 2, 1, 1, 1, 1]
    for ws in copies.values():
        assert len(set(ws)) == len(ws)
    per_worker = np.zeros(3)
    for e, ws in copies.items():
        per_worker[list(ws)] += loads[0][e] / len(ws)
    assert per_worker.max() / per_worker.mean() < 1.2


def test_hot_added_expert_gets_a_home_on_the_emptiest_worker_and_can_be_removed():
    p = plan({0: range(3)}, 2)
    held = [len([k for k in p.experts_on(w) if k[0] == 0]) for w in range(2)]
    home = p.add_expert(0, 3)
    assert held[home] == min(held)
    assert p.replicas_of((0, 3)) == (home,)
    p.remove_expert(0, 3)
    with pytest.raises(InvalidArgument, match="layer 0 expert 3"):
        p.replicas_of((0, 3))


def test_load_meter_accumulates_and_decays():
    m = LoadMeter(decay=0.5)
    m.add(2, [0, 5], [10, 4])
    m.add(2, [5], [4])
    assert m.loads() == {2: {0: 10.0, 5: 8.0}}
    m.age()
    assert m.loads() == {2: {0: 5.0, 5: 4.0}}


def test_plan_rejects_zero_workers():
    with pytest.raises(InvalidArgument, match="at least one worker"):
        plan({0: range(2)}, 0)
