"""Load speed of each store tier against raw reads of the same bytes, in the same run.

Role in the data flow: part of `python -m colibri_dist.bench store`. A blob
file holds real packed experts (format/quantize.pack_expert on random-normal
weights) at 4096-aligned offsets, served through a minimal model adapter, so
the numbers are those of the store code path (ModelSource.read_into,
SpillTier, BufferPool) and not of a mock.
"""
import os
import time
import types
import zlib

import numpy as np

from ...format.quantize import pack_expert
from ...store import ExpertStore

ALIGN = 4096


def make_blobs(hidden, inter, scheme, count, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        g = rng.standard_normal((inter, hidden), dtype=np.float32) * 0.02
        u = rng.standard_normal((inter, hidden), dtype=np.float32) * 0.02
        d = rng.standard_normal((hidden, inter), dtype=np.float32) * 0.02
        out.append(pack_expert(g, u, d, scheme))
    return out


class BlobFile:
    """A file of expert blobs with the reader methods the store uses."""

    def __init__(self, path, blobs, n_experts):
        self.path = os.fspath(path)
        self.layout = blobs[0][1]
        self.nbytes = self.layout.nbytes
        self.slot = (self.nbytes + ALIGN - 1) // ALIGN * ALIGN
        self.moe_layers = [0]
        self.config = types.SimpleNamespace(n_experts=n_experts, scheme=self.layout.scheme)
        self.crc = []
        with open(self.path, "wb") as f:
            for e in range(n_experts):
                blob = blobs[e % len(blobs)][0]
                f.seek(e * self.slot)
                f.write(blob.tobytes())
                self.crc.append(zlib.crc32(blob) & 0xFFFFFFFF)
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")

    def expert_layout(self, layer, e=0):
        return self.layout

    def expert_location(self, layer, e):
        return e * self.slot, self.nbytes, self.crc[e]

    def expert_blob(self, layer, e):
        return self._map[e * self.slot:e * self.slot + self.nbytes]

    def read_expert(self, layer, e):
        return np.array(self.expert_blob(layer, e))

    def close(self):
        self._map = None


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def raw_read(path, direct, chunk=8 << 20):
    """Sequential read of a whole file into one reused aligned buffer: GB/s."""
    from ...store.buffers import aligned_empty
    buf = aligned_empty(chunk)
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if direct else 0))
    total, t0 = 0, time.perf_counter()
    try:
        while True:
            got = os.preadv(fd, [buf], total)
            total += got
            if got < chunk:
                break
    finally:
        os.close(fd)
    return total / (time.perf_counter() - t0) / 1e9


def _best(fn, reps=3):
    """Shortest of `reps` timings (the machine is shared: the minimum is the least disturbed run)."""
    return min(fn() for _ in range(reps))


def _pass(store, n, touch=None):
    t0 = time.perf_counter()
    for e in range(n):
        with store.get(0, e) as h:
            if touch is not None:
                np.copyto(touch, h.blob)
    return time.perf_counter() - t0


def tier_speeds(model, workdir, drop):
    """GB/s of each tier; baselines: raw buffered and O_DIRECT reads of the same file.
    Warm numbers read through the page cache; with drop=True (root) the cold
    disk is measured too (drop_caches before the raw read and the source pass)."""
    n, nb = model.config.n_experts, model.nbytes
    total = n * nb
    out = {"expert_bytes": nb, "experts": n, "total_bytes": total}
    if drop and drop_caches():
        out["raw_buffered_cold_gbs"] = raw_read(model.path, direct=False)
        drop_caches()
        with ExpertStore(model, cache_bytes=total + nb) as st:
            out["source_pread_cold_gbs"] = total / _pass(st, n) / 1e9
        out["page_cache_dropped"] = True
    else:
        out["page_cache_dropped"] = False
    raw_read(model.path, direct=False)                                   # warms the page cache
    out["raw_buffered_gbs"] = max(raw_read(model.path, direct=False) for _ in range(3))
    out["raw_direct_gbs"] = max(raw_read(model.path, direct=True) for _ in range(3))
    slot = (nb + ALIGN - 1) // ALIGN * ALIGN     # same request size as one expert load
    out["raw_direct_expert_sized_gbs"] = max(raw_read(model.path, direct=True, chunk=slot) for _ in range(3))
    touch = np.empty(nb, np.uint8)
    with ExpertStore(model, cache_bytes=None) as st:
        out["mmap_copy_gbs"] = total / _best(lambda: _pass(st, n, touch)) / 1e9
    with ExpertStore(model, cache_bytes=total + nb) as st:
        out["source_fill_fresh_ram_gbs"] = total / _pass(st, n) / 1e9   # first touch of new RAM pages
        out["ram_hit_gbs_equiv"] = total / _best(lambda: _pass(st, n)) / 1e9
        out["ram_hit_us"] = _best(lambda: _pass(st, n)) / n * 1e6
    out["fresh_alloc_copy_gbs"] = _fresh_copy_speed(nb, n)
    with ExpertStore(model, cache_bytes=nb) as st:          # steady state: every get evicts, buffers recycled
        _pass(st, n)
        out["source_pread_gbs"] = total / _best(lambda: _pass(st, n)) / 1e9
    out["source_prefetch_gbs"] = _prefetch_speed(model)
    for codec in (None, "zstd"):
        with ExpertStore(model, cache_bytes=nb, offload_dir=os.path.join(workdir, "off"),
                         compression=codec) as st:
            _pass(st, n)                       # fills the spill tier (each eviction writes once)
            _pass(st, n)
            os.sync()                          # spill files on disk: O_DIRECT reads hit the device
            t = _best(lambda: _pass(st, n))
            s = st.stats()
            name = "ssd_raw" if codec is None else "ssd_zstd"
            out[f"{name}_gbs"] = total / t / 1e9
            out[f"{name}_ssd_hits"] = s["ssd"]["hits"]
            out[f"{name}_stored_ratio"] = s["spill_bytes"] / total
            out[f"{name}_load_ms_p50"] = s["load_ms"]["p50"]
    out["crc32_gbs"] = _crc_speed(touch)
    out["spill_checksum_gbs"] = _spill_checksum_speed(touch)
    out["ssd_raw_vs_raw_direct"] = out["ssd_raw_gbs"] / out["raw_direct_gbs"]
    out["ssd_raw_vs_raw_direct_expert_sized"] = out["ssd_raw_gbs"] / out["raw_direct_expert_sized_gbs"]
    out["source_pread_vs_raw_buffered"] = out["source_pread_gbs"] / out["raw_buffered_gbs"]
    out["mmap_copy_vs_raw_buffered"] = out["mmap_copy_gbs"] / out["raw_buffered_gbs"]
    return out


def _prefetch_speed(model, rounds=3):
    """Source loads issued as the engine does (prefetch of a batch union on the
    loader pool, 2 workers): half the experts at a time into a cache holding
    half, so each round evicts the previous one and recycles its buffers."""
    n, nb = model.config.n_experts, model.nbytes
    half = n // 2
    best = float("inf")
    with ExpertStore(model, cache_bytes=half * nb, prefetch_workers=2) as st:
        for r in range(rounds + 1):
            ids = list(range(half)) if r % 2 == 0 else list(range(half, 2 * half))
            t0 = time.perf_counter()
            st.prefetch(0, ids)
            st.wait_prefetch()
            dt = time.perf_counter() - t0
            for e in ids:
                st.get(0, e).release()          # first use: the next round may evict them
            if r:
                best = min(best, dt)
    return half * nb / best / 1e9


def _fresh_copy_speed(nbytes, count):
    """Baseline for filling an empty cache: copy into newly allocated aligned buffers."""
    from ...store.buffers import aligned_empty
    src = np.ones(nbytes, np.uint8)
    keep, t0 = [], time.perf_counter()
    for _ in range(count):
        b = aligned_empty(nbytes)
        np.copyto(b, src)
        keep.append(b)
    return nbytes * count / (time.perf_counter() - t0) / 1e9


def _spill_checksum_speed(buf, reps=8):
    from ...store.spill import checksum
    t0 = time.perf_counter()
    for _ in range(reps):
        checksum(buf)
    return reps * buf.nbytes / (time.perf_counter() - t0) / 1e9


def _crc_speed(buf, reps=8):
    t0 = time.perf_counter()
    for _ in range(reps):
        zlib.crc32(buf)
    return reps * buf.nbytes / (time.perf_counter() - t0) / 1e9
