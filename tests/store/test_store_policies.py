"""Victim order of the eviction policies."""
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.store.policies import LFRUPolicy, make_policy


def feed(policy, keys):
    seen = set()
    for k in keys:
        (policy.access if k in seen else policy.insert)(k)
        seen.add(k)
    return policy


def test_store_policy_lru_order():
    p = feed(make_policy("lru"), ["a", "b", "c", "a"])
    assert p.victims() == ["b", "c", "a"]
    p.remove("c")
    assert p.victims() == ["b", "a"]


def test_store_policy_lfu_counts_survive_eviction():
    p = feed(make_policy("lfu"), ["a", "a", "a", "b", "c", "c"])
    assert p.victims() == ["b", "c", "a"]
    p.remove("a")
    assert p.victims() == ["b", "c"]
    p.insert("a")                       # back with its history: 4 accesses
    assert p.victims() == ["b", "c", "a"]


def test_store_policy_lfru_between_lru_and_lfu():
    keys = ["a"] * 5 + ["b", "c"]
    assert feed(LFRUPolicy(half_life=100.0), keys).victims()[-1] == "a"   # long memory: frequency wins
    assert feed(LFRUPolicy(half_life=0.2), keys).victims() == ["a", "b", "c"]  # short: recency wins


def test_store_policy_unknown_name():
    with pytest.raises(InvalidArgument, match="lru, lfu, lfru"):
        make_policy("mru")
