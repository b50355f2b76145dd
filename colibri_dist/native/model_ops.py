"""Whole-model ops for the decoder: dense products, RMSNorm, embedding, RoPE, log-softmax, paged-KV attention.

Role in the data flow: the Python orchestration of attention + dense/MoE
decoder layers calls these over numpy float32 arrays; each is one C call
(native/include/colibri.h, "whole-model ops"). Runtime gains matmul,
matmul_many, matmul_heads and attention through the ModelOps mixin (they
need the engine's threads and arena); the rest are handle-less functions.
Every result is batch, chunk, thread and SIMD-level invariant.
"""
import numpy as np

from ..errors import InvalidArgument
from . import _args
from ._lib import check_status, ffi, lib
from .kv_ops import CACHE_DTYPES, AttnSpec, SeqBatch, attention, kv_write, seq_batch
from .matrix import MatrixView, matrix_from_array, matrix_view, quantized_matrix, split_rows

__all__ = ["ModelOps", "MatrixView", "matrix_view", "matrix_from_array", "quantized_matrix", "split_rows", "rmsnorm", "embed", "rope_apply",
           "log_softmax", "AttnSpec", "CACHE_DTYPES", "kv_write", "SeqBatch", "seq_batch"]


def _views(name, views, cols):
    for i, v in enumerate(views):
        if not isinstance(v, MatrixView):
            raise InvalidArgument(f"{name}[{i}] must be a MatrixView (native.matrix_view), got {type(v).__name__}")
        if v.cols != cols:
            raise InvalidArgument(f"{name}[{i}] has {v.cols} columns, the input has {cols}")
    return views


class ModelOps:
    """Mixin of Runtime: the engine-backed dense products and attention (uses self._lock, self._engine())."""

    def _matmul_batch(self, views, biases, xs, x_stride, outs, out_stride, n):
        k = len(views)
        ws = ffi.new("cb_matrix *[]", [v.c for v in views])
        bs = ffi.NULL
        if any(b is not None for b in biases):
            bs = ffi.new("float *[]", [_args.ptr("float *", b) for b in biases])
        xp, op = ffi.new("float *[]", xs), ffi.new("float *[]", outs)
        with self._lock:
            e = self._engine()
            check_status(lib.cb_matmul_batch(e, k, ws, bs, xp, x_stride, op, out_stride, n), "matmul", e)

    def matmul(self, x, view, bias=None):
        """x float32 [n, cols] -> x W^T (+ bias) float32 [n, rows]."""
        return self.matmul_many(x, [view], None if bias is None else [bias])[0]

    def matmul_many(self, x, views, biases=None):
        """One cb_matmul_batch over several matrices sharing the input x [n, cols] -> list of [n, rows_i]."""
        _args.f32("x", x, 2)
        n, cols = x.shape
        views = _views("views", list(views), cols)
        if not views:
            raise InvalidArgument("matmul_many needs at least one matrix")
        biases = [None] * len(views) if biases is None else list(biases)
        if len(biases) != len(views):
            raise InvalidArgument(f"{len(biases)} biases for {len(views)} matrices")
        for i, (b, v) in enumerate(zip(biases, views)):
            if b is not None:
                _args.f32(f"biases[{i}]", b, 1, (v.rows,))
        rows = [v.rows for v in views]
        if len(set(rows)) == 1:                    # one block per matrix: contiguous results, no copy
            buf = np.empty((len(views), n, rows[0]), dtype=np.float32)
            outs, stride, parts = [buf[i] for i in range(len(views))], rows[0], list(buf)
        else:                                      # rows side by side, split afterwards
            buf = np.empty((n, sum(rows)), dtype=np.float32)
            offs = np.cumsum([0] + rows)
            parts = [buf[:, offs[i]:offs[i + 1]] for i in range(len(views))]
            outs, stride = [buf.reshape(-1)[offs[i]:] for i in range(len(views))], sum(rows)
        if n:
            xp = _args.ptr("float *", x)
            self._matmul_batch(views, biases, [xp] * len(views), cols, [_args.ptr("float *", o) for o in outs],
                               stride, n)
        return [np.ascontiguousarray(p) for p in parts]

    def matmul_heads(self, x, views, n_heads, in_dim, offset=0):
        """x float32 [n, n_heads, stride]; head h: x[:, h, offset:offset+in_dim] W_h^T -> [n, n_heads, rows]."""
        _args.f32("x", x, 3, (None, n_heads, None))
        n, _, stride = x.shape
        views = _views("views", list(views), in_dim)
        if len(views) != n_heads:
            raise InvalidArgument(f"{len(views)} matrices for {n_heads} heads")
        if offset < 0 or offset + in_dim > stride:
            raise InvalidArgument(f"offset {offset} + in_dim {in_dim} exceeds the head stride {stride}")
        rows = views[0].rows
        if any(v.rows != rows for v in views):
            raise InvalidArgument(f"every head's matrix needs {rows} rows, got {[v.rows for v in views]}")
        out = np.empty((n, n_heads, rows), dtype=np.float32)
        if n:
            xb, ob = ffi.cast("float *", ffi.from_buffer(x)), ffi.cast("float *", ffi.from_buffer(out))
            self._matmul_batch(views, [None] * n_heads, [xb + h * stride + offset for h in range(n_heads)],
                               n_heads * stride, [ob + h * rows for h in range(n_heads)], n_heads * rows, n)
        return out

    def attention(self, spec, k_cache, v_cache, seq_start, pos0, block_tables, q, sinks=None):
        """Paged-KV causal attention (native/include/colibri.h cb_attention) -> float32 [n_tok, n_heads, v_dim].
        sinks: None or float32 [n_heads], each head's learned sink logit (gpt-oss)."""
        return attention(self, spec, k_cache, v_cache, seq_start, pos0, block_tables, q, sinks)


def rmsnorm(x, weight, eps, out=None):
    """x float32 [n, dim] -> x / sqrt(mean(x^2) + eps) * weight (weight None: no weight); out: a float32
    [n, dim] array to write the result into (not x itself) instead of a fresh one."""
    _args.f32("x", x, 2)
    n, dim = x.shape
    if weight is not None:
        _args.f32("weight", weight, 1, (dim,))
    if out is None:
        out = np.empty_like(x)
    else:
        _args.f32("out", out, 2, (n, dim), writable=True)
        if np.shares_memory(out, x):
            raise InvalidArgument("rmsnorm: out must not overlap x")
    check_status(lib.cb_rmsnorm(_args.ptr("float *", x), n, dim, _args.ptr("float *", weight), float(eps),
                                _args.ptr("float *", out)), "rmsnorm")
    return out


def embed(view, ids):
    """Decoded rows ids of an embedding matrix -> float32 [len(ids), cols]."""
    if not isinstance(view, MatrixView):
        raise InvalidArgument(f"embed needs a MatrixView, got {type(view).__name__}")
    ids = _args.int32s("ids", ids, hi=view.rows - 1)
    out = np.empty((ids.size, view.cols), dtype=np.float32)
    check_status(lib.cb_embed(view.c, _args.ptr("int32_t *", ids), ids.size, _args.ptr("float *", out)), "embed")
    return out


def rope_apply(x, positions, rot_dim, inv_freq, attention_factor=1.0, interleaved=False, offset=0):
    """In place on x float32 [n, n_heads, head_stride]: rotate dims [offset, offset+rot_dim) of every head."""
    _args.f32("x", x, 3, writable=True)
    n, n_heads, head_stride = x.shape
    positions = _args.int32s("positions", positions, n)
    _args.f32("inv_freq", inv_freq, 1, (rot_dim // 2,))
    r = ffi.new("cb_rope *")
    r.rot_dim, r.interleaved, r.attention_factor = int(rot_dim), int(bool(interleaved)), float(attention_factor)
    r.inv_freq = _args.ptr("float *", inv_freq)
    check_status(lib.cb_rope_apply(r, _args.ptr("float *", x), n, n_heads, n_heads * head_stride, head_stride,
                                   int(offset), _args.ptr("int32_t *", positions)), "rope_apply")
    return x


def log_softmax(x):
    """x float32 [n, dim] -> log_softmax along dim (max-subtracted, exp sum in double)."""
    _args.f32("x", x, 2)
    out = np.empty_like(x)
    check_status(lib.cb_log_softmax(_args.ptr("float *", x), x.shape[0], x.shape[1], _args.ptr("float *", out)),
                 "log_softmax")
    return out
