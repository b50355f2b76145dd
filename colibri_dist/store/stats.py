"""Counters of the expert store (names are part of MoeExecutor.stats()).

Role in the data flow: ExpertStore bumps these under its lock; stats() returns a
plain dict. Definitions (docs/STORE.md):

    gets                  get() calls
    hits / misses         hits + misses == gets. A hit needed no load (RAM entry,
                          or a zero-copy mmap view when cache_bytes is None); a
                          miss loaded the blob from the SSD tier or the source.
    ram                   {hits, misses} of the RAM cache (cache_bytes set)
    ssd                   {hits, misses} of the lookups a RAM miss made on the spill tier
    mmap                  {hits, misses}: gets answered by the container: zero-copy views
                          (no cache) or reads (cache); misses = failed reads
    evictions, bytes_loaded (into RAM from ssd or source), load_ms {p50, p99},
    prefetch_issued, prefetch_used (first get of a prefetched entry),
    prefetch_late (gets that waited for an in-flight load: counted as RAM misses),
    prefetch_dropped (no room), checksum_failures (spill files), spill_bytes,
    bypass (loads served without caching: every entry pinned)
"""
from collections import deque

import numpy as np

TIERS = ("ram", "mmap", "ssd")


class StoreStats:
    def __init__(self, window=4096):
        self.gets = 0
        self.tiers = {t: {"hits": 0, "misses": 0} for t in TIERS}
        self.evictions = 0
        self.bytes_loaded = 0
        self.prefetch_issued = 0
        self.prefetch_used = 0
        self.prefetch_dropped = 0
        self.prefetch_late = 0
        self.checksum_failures = 0
        self.bypass = 0
        self.hits = 0
        self.misses = 0
        self._load_ms = deque(maxlen=window)

    def hit(self, tier):
        self.tiers[tier]["hits"] += 1

    def miss(self, tier):
        self.tiers[tier]["misses"] += 1

    def loaded(self, nbytes, seconds):
        self.bytes_loaded += nbytes
        self._load_ms.append(seconds * 1e3)

    def as_dict(self, spill_bytes=0, resident_bytes=0, resident=0, cache_bytes=None):
        lat = np.array(self._load_ms) if self._load_ms else None
        load_ms = {"p50": float(np.percentile(lat, 50)) if lat is not None else 0.0,
                   "p99": float(np.percentile(lat, 99)) if lat is not None else 0.0,
                   "count": 0 if lat is None else int(lat.size)}
        return {
            "gets": self.gets, "hits": self.hits, "misses": self.misses,
            **{t: dict(v) for t, v in self.tiers.items()},
            "evictions": self.evictions, "bytes_loaded": self.bytes_loaded, "load_ms": load_ms,
            "prefetch_issued": self.prefetch_issued, "prefetch_used": self.prefetch_used,
            "prefetch_dropped": self.prefetch_dropped, "prefetch_late": self.prefetch_late,
            "checksum_failures": self.checksum_failures,
            "spill_bytes": spill_bytes, "bypass": self.bypass,
            "resident_bytes": resident_bytes, "resident": resident, "cache_bytes": cache_bytes,
        }
