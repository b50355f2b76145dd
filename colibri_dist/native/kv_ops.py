"""Paged-KV attention wrappers: AttnSpec, kv_write() and the body of Runtime.attention.

Role in the data flow (one decoder layer): q/k/v projections -> rope ->
kv_write(k, v) into the layer's cache pools -> Runtime.attention(q) -> o
projection. Cache pools are numpy arrays [n_blocks, n_kv_heads, block_size,
dim] of float32 (cache_dtype "f32") or uint16 words ("f16", "bf16"; float16
arrays are accepted for "f16"). MLA passes the K pool as v_cache too (or
None) with v_row == qk_dim. Positions, block tables and block ids are
checked in C (cb_kv_check) and reported as NativeError naming the entry.
"""
import functools
from dataclasses import dataclass

import numpy as np

from ..encodings import KV_CACHE_DTYPES, SCHEMES
from ..errors import InvalidArgument
from . import _args
from ._lib import check_status, ffi, lib

CACHE_DTYPES = {name: SCHEMES[name] for name in KV_CACHE_DTYPES}     # name -> cb_dtype code (encodings.py)
_POOL_DTYPES = {"f32": (np.float32,), "f16": (np.uint16, np.float16), "bf16": (np.uint16,)}   # numpy views of each


@dataclass(frozen=True)
class AttnSpec:
    """Geometry of one layer's attention (cb_attn). window 0 = full causal; scale multiplies q.k."""
    n_heads: int
    n_kv_heads: int
    qk_dim: int
    v_dim: int
    v_row: int
    block_size: int
    cache_dtype: str = "f32"
    window: int = 0
    scale: float = 1.0

    def __post_init__(self):
        for name in ("n_heads", "n_kv_heads", "qk_dim", "v_dim", "v_row", "block_size", "window"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 0 <= value < 2**31:
                raise InvalidArgument(f"AttnSpec.{name} must be a non-negative int32, got {value!r}")
        if not isinstance(self.scale, (int, float, np.floating)) or not np.isfinite(self.scale):
            raise InvalidArgument(f"AttnSpec.scale must be a finite number, got {self.scale!r}")
        if self.cache_dtype not in CACHE_DTYPES:
            raise InvalidArgument(f"cache_dtype must be one of {sorted(CACHE_DTYPES)}, got {self.cache_dtype!r}")

    def to_c(self):
        c = ffi.new("cb_attn *")
        c.n_heads, c.n_kv_heads, c.qk_dim, c.v_dim = self.n_heads, self.n_kv_heads, self.qk_dim, self.v_dim
        c.v_row, c.block_size, c.cache_dtype = self.v_row, self.block_size, CACHE_DTYPES[self.cache_dtype]
        c.window, c.scale = self.window, self.scale
        return c


@functools.lru_cache(maxsize=1024)
def _to_c(spec):
    return spec._build_c()


def _pools(spec, k_cache, v_cache, writable):
    """-> (k pool, v pool or None when shared with K, n_blocks)."""
    if not isinstance(spec, AttnSpec):
        raise InvalidArgument(f"spec must be a native.AttnSpec, got {type(spec).__name__}")
    dt = _POOL_DTYPES[spec.cache_dtype]
    k = _args.array("k_cache", k_cache, dt, 4, (None, spec.n_kv_heads, spec.block_size, spec.qk_dim), writable)
    shared = v_cache is None or v_cache is k_cache or (
        isinstance(v_cache, np.ndarray) and _args.address(v_cache) == _args.address(k) and v_cache.shape == k.shape)
    if shared:
        return k, None, k.shape[0]
    v = _args.array("v_cache", v_cache, dt, 4, (k.shape[0], spec.n_kv_heads, spec.block_size, spec.v_row), writable)
    if v.dtype != k.dtype:
        raise InvalidArgument(f"v_cache is {v.dtype} but k_cache is {k.dtype}")
    return k, v, k.shape[0]


class SeqBatch:
    """seq_start / pos0 / block_tables as C arrays (kept alive by this object). Build it once per
    forward step (seq_batch()) and pass it as `seq_start` to kv_write / attention of every layer."""

    def __init__(self, seq_start, pos0, block_tables):
        self.start = _args.int32s("seq_start", seq_start)
        if self.start.size < 1:
            raise InvalidArgument("seq_start needs n_seqs + 1 entries, got 0")
        self.n = self.start.size - 1             # monotonicity, positions and table entries: checked in C
        self.pos0 = _args.int32s("pos0", pos0, self.n)
        if len(block_tables) != self.n:
            raise InvalidArgument(f"block_tables has {len(block_tables)} tables for {self.n} sequences")
        self.tables = [_args.int32s(f"block_tables[{s}]", t, lo=-2**31) for s, t in enumerate(block_tables)]
        if self.start[-1] < self.start[0]:
            raise InvalidArgument(f"seq_start must be non-decreasing, got {self.start.tolist()}")
        self.n_table = np.array([t.size for t in self.tables], dtype=np.int32)
        self.c_tables = ffi.new("int32_t *[]", max(self.n, 1))
        for s, t in enumerate(self.tables):
            self.c_tables[s] = _args.ptr("int32_t *", t) if t.size else ffi.NULL
        self.n_tok = int(self.start[-1])


def seq_batch(seq_start, pos0, block_tables):
    return SeqBatch(seq_start, pos0, block_tables)


def _seqs(seq_start, pos0, block_tables):
    if isinstance(seq_start, SeqBatch):
        if pos0 is not None or block_tables is not None:
            raise InvalidArgument("with a SeqBatch as seq_start, pos0 and block_tables must be None")
        return seq_start
    return SeqBatch(seq_start, pos0, block_tables)


def kv_write(spec, k_cache, v_cache, seq_start, pos0, block_tables, k, v=None):
    """Store k [n_tok, n_kv_heads, qk_dim] (and v [n_tok, n_kv_heads, v_row]) at the sequences' positions."""
    kc, vc, n_blocks = _pools(spec, k_cache, v_cache, writable=True)
    seqs = _seqs(seq_start, pos0, block_tables)
    _args.f32("k", k, 3, (seqs.n_tok, spec.n_kv_heads, spec.qk_dim))
    if v is not None:
        if vc is None:
            raise InvalidArgument("v given but v_cache is the K pool (MLA stores k only) or None")
        _args.f32("v", v, 3, (seqs.n_tok, spec.n_kv_heads, spec.v_row))
    elif vc is not None:
        raise InvalidArgument("v is None but v_cache is a separate pool")
    a = spec.to_c()
    check_status(lib.cb_kv_write(a, _args.ptr("void *", kc), _args.ptr("void *", vc), n_blocks, seqs.n,
                                 _args.ptr("int32_t *", seqs.start), _args.ptr("int32_t *", seqs.pos0), seqs.c_tables,
                                 _args.ptr("int32_t *", seqs.n_table), _args.ptr("float *", k), _args.ptr("float *", v)),
                 "kv_write")


def sinks_array(spec, sinks):
    """The sinks of a layer checked against its spec: None, or float32 [n_heads] (finiteness: checked in C)."""
    return None if sinks is None else _args.f32("sinks", sinks, 1, (spec.n_heads,))


def attention(rt, spec, k_cache, v_cache, seq_start, pos0, block_tables, q, sinks=None):
    """Runtime.attention body: q [n_tok, n_heads, qk_dim] -> float32 [n_tok, n_heads, v_dim]; sinks: None or
    float32 [n_heads] (each head's sink logit in its softmax denominator)."""
    kc, vc, n_blocks = _pools(spec, k_cache, v_cache, writable=False)
    seqs = _seqs(seq_start, pos0, block_tables)
    _args.f32("q", q, 3, (seqs.n_tok, spec.n_heads, spec.qk_dim))
    sinks = sinks_array(spec, sinks)
    out = np.empty((seqs.n_tok, spec.n_heads, spec.v_dim), dtype=np.float32)
    a = spec.to_c()
    a.sinks = _args.ptr("float *", sinks)
    vp = _args.ptr("void *", vc if vc is not None else kc)
    with rt._lock:
        e = rt._engine()
        check_status(lib.cb_attention(e, a, _args.ptr("void *", kc), vp, n_blocks, seqs.n,
                                      _args.ptr("int32_t *", seqs.start), _args.ptr("int32_t *", seqs.pos0),
                                      seqs.c_tables, _args.ptr("int32_t *", seqs.n_table), _args.ptr("float *", q),
                                      _args.ptr("float *", out)), "attention", e)
    return out
