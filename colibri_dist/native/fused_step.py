"""A whole forward step on the fused path: embed -> every layer's cb_layer_forward -> final norm -> LM head.

Role in the data flow: model/decoder.py calls fused_forward when every layer of the step has a LayerPlan (GQA,
experts mapped here). It is the same C calls as native.embed / Step / layer_forward / rmsnorm / Runtime.matmul, in
the same order, so the bits are the same; what it leaves out is their per-call argument checks, because every
input was checked once before (the validation boundary of issue 30): token ids by LLMEngine.add_request (the
engine's steps) or the decoder's checked layout (any other caller; cb_embed still refuses an id outside the
table), the plans when they were built, block tables by the KV cache that made them, the embedding / norm / LM
head when the weights were loaded (StepHead holds their pointers, made once). The step's integers travel in one
int32 array (pack_step). Set COLIBRI_DEBUG_CHECKS=1 to route the step through the checked wrappers instead
(decoder.py reads it).
"""
from itertools import accumulate

import numpy as np

from ..errors import InvalidArgument
from ._lib import check_status, ffi, lib


class StepHead:
    """The constant ends of every fused step, made once per model: the embedding, the final norm (None: none)
    and the LM head, with the C pointers the step passes (the weights stay referenced here)."""

    def __init__(self, embed, final_norm, eps, lm_head):
        self.embed, self.final_norm, self.eps, self.lm_head = embed, final_norm, eps, lm_head
        self.hidden, self.vocab = embed.cols, lm_head.rows
        self.c_embed = embed.c
        self.c_norm = ffi.NULL if final_norm is None else ffi.from_buffer("float[]", final_norm)
        self.c_head = ffi.new("cb_matrix *[]", [lm_head.c])


def pack_step(starts, pos0, positions, tables):
    """The cb_step of a forward step in one int32 array, from Python lists: seq_start [S+1] (starts), pos0 [S],
    n_table [S], positions [n], then every sequence's block table one after another. -> (array, the offset of
    each table in it)."""
    lens = [len(t) for t in tables]
    ints = starts + pos0 + lens + positions
    offsets = list(accumulate(lens, initial=len(ints)))[:-1]
    for t in tables:
        ints += t
    return np.array(ints, dtype=np.int32), offsets


def fused_forward(rt, plans, head, ids, packed, rows, top_k, on_layer=None):
    """-> float32 logits [len(rows), head.vocab] of the given rows of the step.

    ids int32 [n] (every step's new tokens, concatenated); packed = pack_step(...) of the step's S sequences
    (every table non-empty: the KV cache reserved the step); rows int64 indices into [0, n). on_layer(layer,
    idx) after each MoE layer with its routing (expert heat), or None. A layer's NativeError names the layer."""
    n, buf = ids.size, ffi.from_buffer
    ints, offsets = packed
    s = len(offsets)
    h = np.empty((n, head.hidden), dtype=np.float32)
    k = top_k or 1
    idx, w = np.empty((n, k), dtype=np.int32), np.empty((n, k), dtype=np.float32)
    at = buf("int32_t[]", ints)
    c_tables = ffi.new("int32_t *[]", [at + o for o in offsets])
    step = ffi.new("cb_step *", {"n_seqs": s, "seq_start": at, "pos0": at + s + 1, "block_tables": c_tables,
                                 "n_table": at + 2 * s + 1, "positions": at + 3 * s + 1})
    hp, ip, wp = buf("float[]", h), buf("int32_t[]", idx), buf("float[]", w)
    st = lib.cb_embed(head.c_embed, buf("int32_t[]", ids), n, hp)
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
        return _logits(e, head, h[rows])


def _logits(e, head, x):
    """Final norm and LM head of the rows x [m, hidden] (a copy: C-contiguous) -> float32 [m, vocab]."""
    m, buf = x.shape[0], ffi.from_buffer
    out = np.empty((m, head.vocab), dtype=np.float32)
    if m:
        normed = np.empty_like(x)
        xp = buf("float[]", normed)
        st = lib.cb_rmsnorm(buf("float[]", x), m, head.hidden, head.c_norm, head.eps, xp)
        if st:
            check_status(st, "rmsnorm")
        st = lib.cb_matmul_batch(e, 1, head.c_head, ffi.NULL, [xp], head.hidden, [buf("float[]", out)],
                                 head.vocab, m)
        if st:
            check_status(st, "matmul", e)
    return out


def _layer_failed(status, layer, engine):
    try:
        check_status(status, "layer_forward", engine)
    except Exception as exc:
        exc.layer = layer
        raise
