"""RAM tier: budgets, policies, pins, prefetch, counters, zero-copy mmap mode."""
import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument, StoreError
from colibri_dist.store import POLICIES, ExpertStore

TRACE = [(0, 1), (0, 2), (0, 1), (1, 3), (0, 4), (0, 1), (1, 3), (0, 2), (1, 7), (0, 0), (0, 1), (1, 3)]


def check_counters(st):
    assert st["hits"] + st["misses"] == st["gets"]
    assert st["ram"]["hits"] + st["ram"]["misses"] == st["gets"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("n_fit", [0, 1, 2, 3, 16])
def test_store_blobs_exact_for_every_budget(fake_model, policy, n_fit):
    budget = n_fit * fake_model.nbytes
    with ExpertStore(fake_model, cache_bytes=budget, policy=policy) as store:
        for key in TRACE * 2:
            with store.get(*key) as h:
                assert np.array_equal(h.blob, fake_model.blobs[key])
                assert h.blob.ctypes.data % 64 == 0
            st = store.stats()
            assert st["resident_bytes"] <= budget
        check_counters(st)
        assert st["gets"] == 2 * len(TRACE)
        if n_fit == 16:
            assert st["misses"] == len(set(TRACE)) and st["evictions"] == 0
        if n_fit == 0:
            assert st["hits"] == 0 and st["bypass"] == st["gets"]


def test_store_lru_evicts_least_recent(fake_model):
    with ExpertStore(fake_model, cache_bytes=2 * fake_model.nbytes, policy="lru") as store:
        for key in [(0, 1), (0, 2), (0, 1), (0, 3)]:
            store.get(*key).release()
        assert store.resident() == [(0, 1), (0, 3)]
        assert store.stats()["evictions"] == 1


def test_store_lfu_keeps_frequent(fake_model):
    with ExpertStore(fake_model, cache_bytes=2 * fake_model.nbytes, policy="lfu") as store:
        for key in [(0, 1), (0, 1), (0, 1), (0, 2), (0, 3), (0, 4)]:
            store.get(*key).release()
        assert (0, 1) in store.resident()


def test_store_held_entry_never_evicted(fake_model):
    with ExpertStore(fake_model, cache_bytes=fake_model.nbytes) as store:
        held = store.get(0, 1)
        addr = held.blob.ctypes.data
        with store.get(0, 2) as other:          # no room: served uncached
            assert other.tier == "bypass"
            assert np.array_equal(other.blob, fake_model.blobs[(0, 2)])
        assert store.resident() == [(0, 1)]
        assert held.blob.ctypes.data == addr and np.array_equal(held.blob, fake_model.blobs[(0, 1)])
        held.release()
        with store.get(0, 2) as h:
            assert h.tier == "ram"
        assert store.resident() == [(0, 2)]


def test_store_pin_keeps_hot_set(fake_model):
    with ExpertStore(fake_model, cache_bytes=3 * fake_model.nbytes) as store:
        store.pin(0, [5, 6])
        for e in range(8):
            store.get(1, e).release()
        assert {(0, 5), (0, 6)} <= set(store.resident())
        with pytest.raises(StoreError, match="cannot pin layer 1 expert 1"):
            store.pin(1, [0, 1])
        store.unpin(0, [5, 6])
        store.unpin(1, [0])
        for e in range(8):
            store.get(1, e).release()
        assert not {(0, 5), (0, 6)} & set(store.resident())


def test_store_prefetch_protected_until_used(fake_model):
    with ExpertStore(fake_model, cache_bytes=3 * fake_model.nbytes, prefetch_workers=2) as store:
        assert store.prefetch(0, [1, 2]) == 2
        store.wait_prefetch()   # drain the loader queue
        _wait_resident(store, {(0, 1), (0, 2)})
        for e in [3, 4, 5, 6]:                        # would evict 1 and 2 under plain LRU
            store.get(1, e).release()
        assert {(0, 1), (0, 2)} <= set(store.resident())
        for e in [1, 2]:
            with store.get(0, e) as h:
                assert np.array_equal(h.blob, fake_model.blobs[(0, e)])
        st = store.stats()
        assert st["prefetch_issued"] == 2 and st["prefetch_used"] == 2
        assert st["evictions"] == 3 and st["bypass"] == 0   # layer-1 experts took turns in the one free slot
        check_counters(st)


def _wait_resident(store, keys, timeout=10.0):
    import time
    t0 = time.time()
    while not keys <= set(store.resident()):
        assert time.time() - t0 < timeout, store.resident()
        time.sleep(0.005)


def test_store_no_cache_is_zero_copy(fake_model):
    with ExpertStore(fake_model, cache_bytes=None) as store:
        with store.get(1, 3) as h:
            assert np.shares_memory(h.blob, fake_model.expert_blob(1, 3))
            assert h.tier == "mmap"
        st = store.stats()
        assert st["gets"] == st["hits"] == st["mmap"]["hits"] == 1 and st["misses"] == 0
        assert store.prefetch(0, [1]) == 0


def test_store_rejects_bad_keys_and_options(fake_model):
    with ExpertStore(fake_model, cache_bytes=1 << 20) as store:
        with pytest.raises(InvalidArgument, match="layer 9"):
            store.get(9, 0)
        with pytest.raises(InvalidArgument, match="expert 8 out of range for layer 0"):
            store.get(0, 8)
    with pytest.raises(InvalidArgument, match="unknown cache policy 'fifo'"):
        ExpertStore(fake_model, policy="fifo")
    with pytest.raises(InvalidArgument, match="cache_bytes"):
        ExpertStore(fake_model, cache_bytes=-1)


def test_store_numa_hook_binds_each_new_buffer(fake_model, monkeypatch):
    import colibri_dist.numa as numa
    calls = []
    monkeypatch.setattr(numa, "bind_buffer", lambda a, policy, nodes: calls.append((a.ctypes.data % 4096,
                                                                                     a.nbytes, policy, nodes)))
    with ExpertStore(fake_model, cache_bytes=2 * fake_model.nbytes, numa_policy="bind", numa_nodes=[0]) as store:
        for e in range(4):
            store.get(0, e).release()
    assert len(calls) >= 2 and all(c[0] == 0 and c[1] % 4096 == 0 and c[2:] == ("bind", [0]) for c in calls)
    with ExpertStore(fake_model, cache_bytes=2 * fake_model.nbytes) as store:   # no policy: no binding
        store.get(0, 0).release()
    assert len(calls) <= 4


def test_store_rejects_non_integer_expert(fake_model):
    with ExpertStore(fake_model, cache_bytes=None) as store:
        for bad in [1.5, "1", True]:
            with pytest.raises(InvalidArgument, match="out of range for layer 0"):
                store.get(0, bad)
