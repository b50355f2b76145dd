"""SSD spill tier: round trip (raw and zstd), corruption, disk full, unwritable dir."""
import errno
import os
import warnings

import numpy as np
import pytest

from colibri_dist.store import ExpertStore
from colibri_dist.store.spill import SpillTier

KEYS = [(0, e) for e in range(6)] + [(1, e) for e in range(3)]


def cycle(store, model, rounds=2):
    for _ in range(rounds):
        for key in KEYS:
            with store.get(*key) as h:
                assert np.array_equal(h.blob, model.blobs[key])


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_store_spill_round_trip(fake_model, tmp_path, compression):
    with ExpertStore(fake_model, cache_bytes=2 * fake_model.nbytes, offload_dir=tmp_path / "off",
                     compression=compression) as store:
        cycle(store, fake_model, rounds=3)
        st = store.stats()
        assert st["ssd"]["hits"] > 0 and st["spill_bytes"] > 0
        # every key is read from the source once; later misses come back from the spill tier
        assert st["mmap"]["hits"] == len(KEYS)
        assert st["ssd"]["hits"] + st["ssd"]["misses"] == st["ram"]["misses"]
        assert st["checksum_failures"] == 0
        spill_dir = store.spill.dir
        assert len([f for f in os.listdir(spill_dir) if f.endswith(".spill")]) == len(KEYS)
    assert not os.path.exists(spill_dir)


def test_store_spill_zstd_shrinks_compressible_blobs(tmp_path):
    tier = SpillTier(tmp_path, compression="zstd")
    blob = np.zeros(1 << 16, dtype=np.uint8)
    assert tier.write((0, 0), blob)
    assert tier.spill_bytes < blob.nbytes // 10
    got, _ = tier.read((0, 0), lambda n: np.empty((n + 4095) // 4096 * 4096, dtype=np.uint8))
    assert np.array_equal(got, blob)
    tier.close()


def test_store_spill_corruption_detected_and_refetched(fake_model, tmp_path):
    with ExpertStore(fake_model, cache_bytes=fake_model.nbytes, offload_dir=tmp_path / "off") as store:
        store.get(0, 1).release()
        store.get(0, 2).release()          # evicts (0,1) -> spilled
        path = store.spill.path((0, 1))
        with open(path, "r+b") as f:
            f.seek(4096 + 100)
            byte = f.read(1)
            f.seek(4096 + 100)
            f.write(bytes([byte[0] ^ 0xFF]))
        with store.get(0, 1) as h:
            assert np.array_equal(h.blob, fake_model.blobs[(0, 1)])
        st = store.stats()
        assert st["checksum_failures"] == 1
        assert st["mmap"]["hits"] == 3      # (0,1) fetched again from the source
        assert not store.spill.has((0, 1)) and not os.path.exists(path)   # discarded


def test_store_spill_disk_full_warns_once_and_serves(fake_model, tmp_path, monkeypatch):
    calls = []

    def full(self, path, header, payload):
        calls.append(path)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(SpillTier, "_write_file", full)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ExpertStore(fake_model, cache_bytes=fake_model.nbytes, offload_dir=tmp_path / "off") as store:
            cycle(store, fake_model, rounds=2)
            st = store.stats()
    spill_warnings = [w for w in caught if "spilling to SSD disabled" in str(w.message)]
    assert len(spill_warnings) == 1 and "No space left" in str(spill_warnings[0].message)
    assert len(calls) == 1
    assert st["spill_bytes"] == 0 and st["ssd"]["hits"] == 0
    assert st["mmap"]["hits"] == st["misses"]


def test_store_unwritable_offload_dir_warns_once_and_serves(fake_model, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ExpertStore(fake_model, cache_bytes=fake_model.nbytes, offload_dir=blocker / "off") as store:
            cycle(store, fake_model, rounds=2)
            assert store.stats()["spill_bytes"] == 0
    assert len([w for w in caught if "spilling to SSD disabled" in str(w.message)]) == 1


def test_store_spill_buffered_fallback_matches_direct(fake_model, tmp_path):
    tier = SpillTier(tmp_path, direct_io=False)
    blob = fake_model.blobs[(0, 0)]
    tier.write((0, 0), blob)
    got, _ = tier.read((0, 0), lambda n: np.empty((n + 4095) // 4096 * 4096, dtype=np.uint8))
    assert np.array_equal(got, blob)
    tier.close()


def test_store_spill_checksum_sees_flips_reorders_and_zeroed_blocks():
    from colibri_dist.store.spill import checksum
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, 3 * 4096 + 72, dtype=np.uint8)
    c = checksum(a)
    for i in [0, 5, 4096, 3 * 4096 + 3, a.size - 1]:
        b = a.copy()
        b[i] ^= 0x10
        assert checksum(b) != c, i
    b = a.copy()
    b[:4096], b[4096:8192] = a[4096:8192], a[:4096]
    assert checksum(b) != c
    b = a.copy()
    b[4096:8192] = 0
    assert checksum(b) != c
    assert checksum(a[:-8]) != checksum(np.concatenate([a[:-8], np.zeros(8, np.uint8)]))


def test_store_spill_uses_o_direct_where_possible(fake_model, tmp_path, monkeypatch):
    opened = []
    real = SpillTier._open_direct

    def spy(self, path):
        fd = real(self, path)
        opened.append(fd is not None)
        return fd

    monkeypatch.setattr(SpillTier, "_open_direct", spy)
    with ExpertStore(fake_model, cache_bytes=fake_model.nbytes, offload_dir=tmp_path / "off") as store:
        cycle(store, fake_model, rounds=2)
        hits = store.stats()["ssd"]["hits"]
    assert hits > 0 and len(opened) == hits
    if hasattr(os, "O_DIRECT") and _fs_allows_direct(tmp_path):
        assert all(opened)


def _fs_allows_direct(d):
    p = d / "probe"
    p.write_bytes(b"\0" * 4096)
    try:
        os.close(os.open(p, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False


def test_store_spill_resumes_after_disk_full_clears(fake_model, tmp_path, monkeypatch):
    real = SpillTier._write_file
    full = [True]

    def maybe_full(self, path, header, payload):
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, header, payload)

    monkeypatch.setattr(SpillTier, "_write_file", maybe_full)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ExpertStore(fake_model, cache_bytes=fake_model.nbytes, offload_dir=tmp_path / "off") as store:
            store.spill.retry_s = 0.0
            cycle(store, fake_model, rounds=1)
            assert store.stats()["spill_bytes"] == 0
            full[0] = False                     # space freed: the next eviction spills again
            cycle(store, fake_model, rounds=2)
            st = store.stats()
            assert st["spill_bytes"] > 0 and st["ssd"]["hits"] > 0
    assert len([w for w in caught if "spilling to SSD disabled" in str(w.message)]) == 1


def test_store_spill_unwritable_is_permanent(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.warns(RuntimeWarning, match="not writable"):
        tier = SpillTier(blocker / "off", retry_s=0.0)
    assert not tier.writable() and not tier.readable()
    assert not tier.write((0, 0), np.zeros(64, np.uint8))
