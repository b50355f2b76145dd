"""A whole forward step on the fused path: embed -> every layer's cb_layer_forward -> final norm -> LM head.

Role in the data flow: model/decoder.py calls fused_forward when every layer of the step has a LayerPlan (GQA,
experts mapped here). It is the same C calls as native.embed / Step / layer_forward / rmsnorm / Runtime.matmul, in
the same order, so the bits are the same; what it leaves out is their per-call argument checks, because every
input was checked once before (the validation boundary of issue 30): token ids by the decoder's step plan, the
plans when they were built, block tables by the KV cache that made them, the embedding / norm / LM head when the
weights were loaded. Set COLIBRI_DEBUG_CHECKS=1 to route the step through the checked wrappers instead
(decoder.py reads it).
"""
import numpy as np

from ..errors import InvalidArgument
from ._lib import check_status, ffi, lib


def fused_forward(rt, plans, embed, ids, seq_start, pos0, positions, tables, final_norm, eps, lm_head, rows, top_k,
                  on_layer=None):
    """-> float32 logits [len(rows), lm_head.rows] of the given rows of the step.

    ids int32 [n] (every step's new tokens, concatenated), seq_start int32 [S+1], pos0 int32 [S], positions int32
    [n] (every token's position), tables: S int32 block tables (each non-empty: the KV cache reserved the step),
    rows int64 indices into [0, n). on_layer(layer, idx) after each MoE layer with its routing (expert heat), or
    None. A layer's NativeError names the layer."""
    n, hidden, buf = ids.size, embed.cols, ffi.from_buffer
    h = np.empty((n, hidden), dtype=np.float32)
    k = top_k or 1
    idx, w = np.empty((n, k), dtype=np.int32), np.empty((n, k), dtype=np.float32)
    s = len(tables)
    ints = np.concatenate((seq_start, pos0, [t.size for t in tables], positions)).astype(np.int32, copy=False)
    at = buf("int32_t[]", ints)                        # seq_start [S+1], pos0 [S], n_table [S], positions [n]
    c_tables = ffi.new("int32_t *[]", [buf("int32_t[]", t) for t in tables])
    step = ffi.new("cb_step *", {"n_seqs": s, "seq_start": at, "pos0": at + s + 1, "block_tables": c_tables,
                                 "n_table": at + 2 * s + 1, "positions": at + 3 * s + 1})
    hp, ip, wp = buf("float[]", h), buf("int32_t[]", idx), buf("float[]", w)
    st = lib.cb_embed(embed.c, buf("int32_t[]", ids), n, hp)
    if st:
        check_status(st, "embed")
    with rt._lock:
        e = rt._engine()
        for layer, plan in enumerate(plans):
            moe = plan.top_k != 0
            if moe and plan.top_k != k:                         # idx / w hold k per token: never write past them
                raise InvalidArgument(f"fused_forward: layer {layer}'s plan routes top_k {plan.top_k}, the step {k}")
            st = lib.cb_layer_forward(e, plan.c, step, hp, n, ip if moe else ffi.NULL, wp if moe else ffi.NULL)
            if st:
                _layer_failed(st, layer, e)
            if moe and on_layer is not None:
                on_layer(layer, idx)
        x = np.ascontiguousarray(h[rows])
        m = x.shape[0]
        out = np.empty((m, lm_head.rows), dtype=np.float32)
        if m:
            normed = np.empty_like(x)
            norm = ffi.NULL if final_norm is None else buf("float[]", final_norm)
            xp = buf("float[]", normed)
            st = lib.cb_rmsnorm(buf("float[]", x), m, hidden, norm, eps, xp)
            if st:
                check_status(st, "rmsnorm")
            st = lib.cb_matmul_batch(e, 1, [lm_head.c], ffi.NULL, [xp], hidden, [buf("float[]", out)],
                                     lm_head.rows, m)
            if st:
                check_status(st, "matmul", e)
    return out


def _layer_failed(status, layer, engine):
    try:
        check_status(status, "layer_forward", engine)
    except Exception as exc:
        exc.layer = layer
        raise
