"""Source failures: a clear error naming layer and expert, nothing left behind."""
import numpy as np
import pytest

from colibri_dist.errors import StoreError
from colibri_dist.store import ExpertStore, FlakySource, ModelSource


def test_store_source_error_names_key_and_leaves_nothing(fake_model):
    source = FlakySource(ModelSource(fake_model), fail=lambda l, e, n: (l, e) == (1, 5) and n <= 3)  # n counts all reads
    with ExpertStore(fake_model, cache_bytes=3 * fake_model.nbytes, source=source) as store:
        store.get(0, 0).release()
        before = store.stats()["resident_bytes"]
        with pytest.raises(StoreError, match=r"layer 1 expert 5: reading from the source failed"):
            store.get(1, 5)
        assert store.resident() == [(0, 0)]
        assert store.stats()["resident_bytes"] == before and not store._inflight
        store.prefetch(1, [5])                  # fails in the background (second failing read)
        store.wait_prefetch()
        assert (1, 5) not in store.resident() and not store._inflight
        with store.get(1, 5) as h:              # third read succeeds
            assert np.array_equal(h.blob, fake_model.blobs[(1, 5)])
        st = store.stats()
        assert st["hits"] + st["misses"] == st["gets"] == 3
        assert st["mmap"]["misses"] == 2


def test_store_corrupt_source_blob_is_an_error(fake_model):
    with open(fake_model.path, "r+b") as f:          # flip one byte of layer 0 expert 3
        f.seek(fake_model.offsets[(0, 3)] + 7)
        b = f.read(1)
        f.seek(fake_model.offsets[(0, 3)] + 7)
        f.write(bytes([b[0] ^ 1]))
    with ExpertStore(fake_model, cache_bytes=1 << 20) as store:
        with pytest.raises(StoreError, match=r"layer 0 expert 3.*checksum mismatch"):
            store.get(0, 3)
        assert store.resident() == []


def test_store_slow_source_still_exact(fake_model):
    with ExpertStore(fake_model, cache_bytes=fake_model.nbytes, source_delay_s=0.002) as store:
        for e in range(4):
            with store.get(0, e) as h:
                assert np.array_equal(h.blob, fake_model.blobs[(0, e)])
        assert store.stats()["load_ms"]["p50"] >= 2.0


def test_store_wrapped_model_source_read_is_honoured(fake_model, monkeypatch):
    """The stress harness slows sources by wrapping ModelSource.read; the fast
    read_into path must then go through the wrapper."""
    calls = []
    plain = ModelSource.read

    def wrapped(self, layer, e):
        calls.append((layer, e))
        return plain(self, layer, e)

    monkeypatch.setattr(ModelSource, "read", wrapped)
    with ExpertStore(fake_model, cache_bytes=fake_model.nbytes) as store:
        for e in range(3):
            with store.get(0, e) as h:
                assert np.array_equal(h.blob, fake_model.blobs[(0, e)])
    assert calls == [(0, 0), (0, 1), (0, 2)]
