"""ExpertStore: RAM cache (lru/lfu/lfru) <- SSD spill tier <- source (container / segments).

Role in the data flow: the engine and every pool worker call get(layer, e)
right before running an expert and release the handle right after. The store
moves opaque uint8 blobs plus their ExpertLayout; it never calls the kernels
(handle.view builds the native view lazily).

    cache_bytes=None   every get is a zero-copy view of the mmap'd container (checked by
                       the reader before its first use in the process, then remembered)
    cache_bytes=N      owned aligned RAM buffers under N bytes; a miss loads from
                       the spill tier (if offload_dir) or the source (one read,
                       checksum verified); evicted entries spill to offload_dir

Invariants: an entry with a live handle, a pin or an unused prefetch is never
evicted; its buffer is never freed or reused while anything references it; a
load that finds no evictable room is served uncached ("bypass") so the budget
is never exceeded by cached entries; a failed load leaves nothing behind.
"""
import numbers
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait

import numpy as np

from ..errors import IntegrityError, InvalidArgument, StoreError
from .buffers import PAGE, BufferPool
from .handle import ExpertHandle
from .policies import make_policy
from .source import ModelSource, SlowSource, as_blob, read_into
from .spill import SpillCorrupt, SpillTier, round_up
from .stats import StoreStats

PROTECT_GENERATIONS = 4   # an unused prefetch stays protected for this many prefetch() calls


def _byte_budget(value):
    """None, an int >= 0 or a size string like "64MiB" (config.parse_size) -> None or int."""
    if value is None:
        return None
    if isinstance(value, str):
        from ..config import parse_size
        try:
            return parse_size(value)
        except ValueError as exc:
            raise InvalidArgument(f"cache_bytes: {exc}") from exc
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise InvalidArgument(f"cache_bytes must be None, an int >= 0 or a size like '64MiB', got {value!r}")
    return int(value)


class _Entry:
    __slots__ = ("key", "blob", "buf", "layout", "nbytes", "pins", "pinned", "protected", "prefetched",
                 "ready", "view", "cached")

    def __init__(self, key, nbytes):
        self.key = key
        self.nbytes = nbytes
        self.blob = self.buf = self.layout = self.view = None
        self.pins = 0
        self.pinned = False         # pin(): resident until unpin()
        self.protected = None       # prefetch generation until first use
        self.prefetched = False     # loaded by prefetch(), not used yet
        self.ready = False
        self.cached = True


class ExpertStore:
    def __init__(self, model, cache_bytes=None, offload_dir=None, policy="lru", compression=None,
                 zstd_level=3, prefetch_workers=2, source=None, source_delay_s=0.0, segments=None,
                 numa_policy=None, numa_nodes=None, policy_options=None):
        cache_bytes = _byte_budget(cache_bytes)
        self.model = model
        self.cache_bytes = cache_bytes
        self.segments = segments
        self.source = source or ModelSource(model, segments)
        if source_delay_s:
            self.source = SlowSource(self.source, source_delay_s)
        self.policy = make_policy(policy, **(policy_options or {}))
        self.stats_ = StoreStats()
        self._lock = threading.RLock()
        self._entries = {}
        self._inflight = {}                 # key -> threading.Event
        self._resident = 0                  # bytes of cached + reserved entries
        self._gen = 0
        self._pending = set()               # prefetch futures not finished yet
        self.pool = BufferPool(max_free_bytes=(cache_bytes or 0) // 4 + (64 << 20),
                               numa_policy=numa_policy, numa_nodes=numa_nodes)
        self.spill = None
        if offload_dir is not None and cache_bytes is not None:
            self.spill = SpillTier(offload_dir, compression=compression, zstd_level=zstd_level)
        elif compression not in (None, "none", "zstd"):
            raise InvalidArgument(f"compression must be None, 'none' or 'zstd', got {compression!r}")
        self._loader = ThreadPoolExecutor(max(1, int(prefetch_workers)), thread_name_prefix="colibri-prefetch")
        self._closed = False

    # ---- keys
    def n_experts(self, layer):
        base = self.model.config.n_experts
        return base + (len(self.segments.added(layer)) if self.segments is not None else 0)

    def check_key(self, layer, e):
        layers = self.model.moe_layers
        if layer not in layers:
            raise InvalidArgument(f"layer {layer!r} is not an MoE layer of this model (MoE layers: {list(layers)})")
        n = self.n_experts(layer)
        if isinstance(e, bool) or not isinstance(e, numbers.Integral) or not (0 <= e < n):
            raise InvalidArgument(f"expert {e!r} out of range for layer {layer} ({n} experts; expected an int in [0, {n}))")
        return (int(layer), int(e))

    # ---- get / release
    def get(self, layer, e):
        """Handle to expert e of layer (context manager; pinned until released)."""
        key = self.check_key(layer, e)
        if self._closed:
            raise StoreError("expert store is closed")
        if self.cache_bytes is None:
            return self._get_mapped(key)
        waited = False
        while True:
            with self._lock:
                ent = self._entries.get(key)
                if ent is not None and ent.ready:
                    return self._hit(ent, waited)
                waiting = self._inflight.get(key)
                if waiting is None:
                    self.stats_.gets += 1
                    self.stats_.misses += 1
                    self.stats_.miss("ram")
                    self._inflight[key] = threading.Event()
                    break
            waiting.wait()
            waited = True
        return self._load_for_get(key)

    def _get_mapped(self, key):
        try:
            blob = as_blob(self.source.view(*key))
        except Exception as exc:
            with self._lock:
                self.stats_.gets += 1
                self.stats_.misses += 1
                self.stats_.miss("mmap")
            if isinstance(exc, IntegrityError):     # damaged/invalid data: the reader's message as is
                raise
            raise StoreError(f"layer {key[0]} expert {key[1]}: mapping the expert failed: {exc}") from exc
        with self._lock:
            self.stats_.gets += 1
            self.stats_.hits += 1
            self.stats_.hit("mmap")
        return ExpertHandle(key[0], key[1], blob, self.source.layout(*key), "mmap")

    def _hit(self, ent, waited=False):
        """Under the lock: pin a ready entry and count it: a hit, unless this get had to wait
        for the entry's load (a prefetch issued too late): that is a miss (prefetch_late)."""
        st = self.stats_
        st.gets += 1
        if waited:
            st.misses += 1
            st.miss("ram")
            st.prefetch_late += 1
        else:
            st.hits += 1
            st.hit("ram")
        ent.protected = None
        if ent.prefetched:
            ent.prefetched = False
            st.prefetch_used += 1
        ent.pins += 1
        self.policy.access(ent.key)
        return ExpertHandle(ent.key[0], ent.key[1], ent.blob, ent.layout, "ram", ent, self._release)

    def _release(self, handle):
        with self._lock:
            ent = handle._entry
            handle._entry = None
            handle.blob = None
            ent.pins -= 1
            drop = not ent.cached and ent.pins == 0
            if drop:
                buf, ent.buf, ent.blob, ent.view = ent.buf, None, None, None
        if drop:
            self.pool.give_back(buf)

    def _load_for_get(self, key):
        """Miss path: make room, load, insert pinned (or serve uncached)."""
        ent = None
        try:
            ent, victims = self._reserve(key, self.source.nbytes(*key), protect_ok=False)
            self._retire(victims)
            blob, buf, layout = self._load(key)
            with self._lock:
                ent = self._publish(key, ent, blob, buf, layout, protected=None)
                ent.pins += 1
                tier = "ram" if ent.cached else "bypass"
                return ExpertHandle(key[0], key[1], ent.blob, layout, tier, ent, self._release)
        except BaseException:
            self._abandon(key, ent)
            raise

    # ---- room and eviction
    def _reserve(self, key, nbytes, protect_ok):
        """Under the lock: evict enough unpinned entries for nbytes. Returns
        (reserved entry or None for bypass, victims). protect_ok: a prefetch
        may not evict other unused prefetches."""
        with self._lock:
            need = self._resident + nbytes - self.cache_bytes
            victims, freed = [], 0
            if need > 0:
                for vkey in self.policy.victims():
                    if freed >= need:
                        break
                    v = self._entries[vkey]
                    if v.pins or v.pinned or not v.ready or self._protected(v):
                        continue
                    victims.append(v)
                    freed += v.nbytes
                if freed < need:
                    return None, []
            for v in victims:
                del self._entries[v.key]
                self.policy.remove(v.key)
                self._resident -= v.nbytes
                self.stats_.evictions += 1
            ent = _Entry(key, nbytes)
            self._entries[key] = ent
            self._resident += nbytes
            return ent, victims

    def _protected(self, ent):
        return ent.protected is not None and self._gen - ent.protected < PROTECT_GENERATIONS

    def _retire(self, victims):
        """Outside the lock: spill evicted blobs, recycle their buffers."""
        for v in victims:
            blob, buf = v.blob, v.buf
            v.blob = v.buf = v.view = None
            if self.spill is not None and self.spill.writable():
                self.spill.write(v.key, blob)
            del blob
            self.pool.give_back(buf)

    def _publish(self, key, ent, blob, buf, layout, protected):
        """Under the lock: make a loaded blob visible (cached) or keep it private (bypass)."""
        if ent is None:
            ent = _Entry(key, blob.nbytes)
            ent.cached = False
            self.stats_.bypass += 1
        else:
            self.policy.insert(key)
            ent.protected = protected
        ent.blob, ent.buf, ent.layout, ent.ready = blob, buf, layout, True
        self._inflight.pop(key).set()
        return ent

    def _abandon(self, key, ent):
        """A load failed: drop the reservation and wake waiters; nothing stays behind."""
        with self._lock:
            if ent is not None and self._entries.get(key) is ent and not ent.ready:
                del self._entries[key]
                self._resident -= ent.nbytes
            event = self._inflight.pop(key, None)
        if event is not None:
            event.set()

    # ---- loading
    def _load(self, key):
        """(blob, buffer, layout) from the spill tier or the source; raises StoreError."""
        layout = self.source.layout(*key)
        t0 = time.perf_counter()
        got = self._load_spilled(key)
        if got is None:
            got = self._load_source(key, layout.nbytes)
        blob, buf = got
        if blob.nbytes != layout.nbytes:
            raise StoreError(f"layer {key[0]} expert {key[1]}: loaded {blob.nbytes} bytes, "
                             f"layout says {layout.nbytes}")
        with self._lock:
            self.stats_.loaded(blob.nbytes, time.perf_counter() - t0)
        return blob, buf, layout

    def _take(self, nbytes):
        return self.pool.take(round_up(nbytes, PAGE))

    def _load_spilled(self, key):
        if self.spill is None or not self.spill.readable():
            return None
        try:
            got = self.spill.read(key, self._take)
        except SpillCorrupt:
            with self._lock:
                self.stats_.checksum_failures += 1
                self.stats_.miss("ssd")
            return None
        with self._lock:
            (self.stats_.hit if got is not None else self.stats_.miss)("ssd")
        return got

    def _load_source(self, key, nbytes):
        try:
            blob, buf = read_into(self.source, key[0], key[1], self._take)
        except Exception as exc:
            with self._lock:
                self.stats_.miss("mmap")
            if isinstance(exc, IntegrityError):
                raise
            raise StoreError(f"layer {key[0]} expert {key[1]}: reading from the source failed: {exc}") from exc
        with self._lock:
            self.stats_.hit("mmap")
        return blob, buf

    # ---- prefetch
    def prefetch(self, layer, experts):
        """Start loading experts in the background; returns how many loads were issued.
        Each stays protected from eviction until its first get (or until
        PROTECT_GENERATIONS later prefetch calls)."""
        if self.cache_bytes is None or self._closed:
            return 0
        keys = [self.check_key(layer, e) for e in experts]
        issued = 0
        with self._lock:
            self._gen += 1
            gen = self._gen
            for key in keys:
                ent = self._entries.get(key)
                if ent is not None:
                    if ent.ready:
                        ent.protected = gen      # resident and about to be used: keep it
                    continue
                if key in self._inflight:
                    continue
                self._inflight[key] = threading.Event()
                self.stats_.prefetch_issued += 1
                issued += 1
                fut = self._loader.submit(self._prefetch_one, key, gen)
                self._pending.add(fut)
                fut.add_done_callback(self._prefetch_done)
        return issued

    def _prefetch_done(self, fut):
        with self._lock:
            self._pending.discard(fut)

    def wait_prefetch(self, timeout=None):
        """Block until every issued prefetch has finished (loaded, dropped or failed)."""
        with self._lock:
            pending = list(self._pending)
        futures_wait(pending, timeout=timeout)

    def _prefetch_one(self, key, gen):
        ent = None
        try:
            ent, victims = self._reserve(key, self.source.nbytes(*key), protect_ok=False)
            if ent is None:
                with self._lock:
                    self.stats_.prefetch_dropped += 1
                    self._inflight.pop(key).set()
                return
            self._retire(victims)
            blob, buf, layout = self._load(key)
            with self._lock:
                self._publish(key, ent, blob, buf, layout, protected=gen).prefetched = True
        except BaseException:
            self._abandon(key, ent)      # the next get retries and raises

    # ---- pins
    def pin(self, layer, experts):
        """Load experts and keep them resident until unpin() (no-op without a RAM cache)."""
        if self.cache_bytes is None:
            return
        for e in experts:
            with self.get(layer, e) as h:
                with self._lock:
                    if h.tier != "ram":
                        raise StoreError(f"cannot pin layer {layer} expert {e}: cache_bytes "
                                         f"{self.cache_bytes} has no room left for it")
                    h._entry.pinned = True

    def unpin(self, layer, experts):
        with self._lock:
            for e in experts:
                ent = self._entries.get(self.check_key(layer, e))
                if ent is not None:
                    ent.pinned = False

    # ---- hot-add
    def add_expert(self, layer, weights, router_row, bias=0.0):
        """Quantize in the layer's encodings, persist to the segment, return the new id."""
        from .hot_add import pack_new_expert
        if self.segments is None:
            raise StoreError("hot-add needs a model opened from a path (no segment directory)")
        self.check_key(layer, 0)
        blob, layout = pack_new_expert(self.model, self.source.layout(layer, 0), layer, weights, router_row, bias)
        new_id, _ = self.segments.add(layer, self.model.config.n_experts, blob, layout,
                                      np.asarray(router_row, dtype=np.float32), bias)
        return new_id

    def remove_expert(self, layer, e):
        key = self.check_key(layer, e)
        if self.segments is None:
            raise StoreError("remove_expert needs a model opened from a path (no segment directory)")
        self.segments.remove(*key)

    def refresh(self):
        """Pick up experts another process added or removed since open."""
        if self.segments is not None:
            self.segments.refresh()

    # ---- introspection
    def resident(self):
        with self._lock:
            return sorted(k for k, v in self._entries.items() if v.ready)

    def stats(self):
        with self._lock:
            return self.stats_.as_dict(
                spill_bytes=self.spill.spill_bytes if self.spill is not None else 0,
                resident_bytes=self._resident, resident=len(self._entries), cache_bytes=self.cache_bytes)

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._loader.shutdown(wait=True)
        if self.spill is not None:
            self.spill.close()
        with self._lock:
            self._entries.clear()
            self._resident = 0
        self.pool.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
