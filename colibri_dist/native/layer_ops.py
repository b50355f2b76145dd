"""One decoder layer in one native call: LayerPlan, Step and the body of Runtime.layer_forward (cb_layer_forward).

Role in the data flow: model/decoder.py builds a LayerPlan per GQA layer once (weights, norms, rope, the layer's
KV pools, its MoE block or dense MLP, every argument checked here) and a Step per forward step; each layer of
the step is then one C call (native/src/layer.c) that runs the ops model/attention.py and decoder.py would call
one by one, in the same order, so the bits are the same.
"""
import numpy as np

from ..errors import InvalidArgument
from . import _args
from ._lib import check_status, ffi, lib
from .kv_ops import AttnSpec, SeqBatch, _pools, sinks_array
from .matrix import MatrixView
from .runtime import MoeLayer
from .views import ExpertView

QK_NORMS = {"none": 0, "full": 1, "head": 2}     # cb_qk_norm


def _matrix(name, m, rows, cols):
    if not isinstance(m, MatrixView):
        raise InvalidArgument(f"{name} must be a MatrixView, got {type(m).__name__}")
    if (m.rows, m.cols) != (rows, cols):
        raise InvalidArgument(f"{name} is [{m.rows}, {m.cols}], the layer needs [{rows}, {cols}]")
    return m.c


def _vector(name, v, size):
    return _args.ptr("float *", None if v is None else _args.f32(name, v, 1, (size,)))


class LayerPlan:
    """A GQA layer as cb_decoder_layer. mats/biases/norms as model.weights.LayerWeights; rope: a RopeSpec; spec:
    the layer's AttnSpec (v_dim = v_row = qk_dim); exactly one of moe (a MoeLayer) and mlp (an ExpertView);
    sinks: None or float32 [n_heads] (gpt-oss's attention sinks)."""

    def __init__(self, hidden, eps, ln_attn, ln_mlp, mats, biases, norms, qk_norm, clip_qkv, rope, spec,
                 k_pool, v_pool, moe=None, mlp=None, sinks=None):
        if not isinstance(spec, AttnSpec) or spec.v_dim != spec.qk_dim or spec.v_row != spec.qk_dim:
            raise InvalidArgument("LayerPlan needs a GQA AttnSpec (v_dim = v_row = qk_dim)")
        if (moe is None) == (mlp is None) or not isinstance(moe or mlp, (MoeLayer, ExpertView)):
            raise InvalidArgument("LayerPlan needs exactly one of moe (a MoeLayer) and mlp (an ExpertView)")
        kq, kk = spec.n_heads * spec.qk_dim, spec.n_kv_heads * spec.qk_dim
        kc, vc, n_blocks = _pools(spec, k_pool, v_pool, writable=True)
        sinks = sinks_array(spec, sinks)
        self._keep = (ln_attn, ln_mlp, mats, biases, norms, rope, kc, vc, moe, mlp, sinks)
        self.top_k = moe.c.gating.top_k if moe is not None else 0
        c = self.c = ffi.new("cb_decoder_layer *")
        c.hidden, c.rms_eps = hidden, float(eps)
        c.ln_attn, c.ln_mlp = _vector("ln_attn", ln_attn, hidden), _vector("ln_mlp", ln_mlp, hidden)
        c.q, c.k = _matrix("q", mats["q"], kq, hidden), _matrix("k", mats["k"], kk, hidden)
        c.v, c.o = _matrix("v", mats["v"], kk, hidden), _matrix("o", mats["o"], hidden, kq)
        for part, size in zip("qkvo", (kq, kk, kk, hidden)):
            setattr(c, f"bias_{part}", _vector(f"bias_{part}", biases.get(part), size))
        self._norms(c, qk_norm, norms, spec, kq, kk)
        c.clip_qkv = float(clip_qkv or 0.0)
        c.rope.rot_dim, c.rope.interleaved = int(rope.rot_dim), int(bool(rope.interleaved))
        c.rope.attention_factor = float(rope.attention_factor)
        c.rope.inv_freq = _vector("inv_freq", rope.inv_freq, rope.rot_dim // 2)
        c.attn = spec.to_c()[0]
        c.attn.sinks = _args.ptr("float *", sinks)
        c.k_cache, c.v_cache, c.n_blocks = _args.ptr("void *", kc), _args.ptr("void *", vc), n_blocks
        if moe is not None:
            c.moe = moe.c
        else:
            c.mlp = mlp.c

    @staticmethod
    def _norms(c, qk_norm, norms, spec, kq, kk):
        if qk_norm not in QK_NORMS:
            raise InvalidArgument(f"qk_norm must be one of {sorted(QK_NORMS)}, got {qk_norm!r}")
        c.qk_norm = QK_NORMS[qk_norm]
        if qk_norm != "none":
            sizes = (spec.qk_dim, spec.qk_dim) if qk_norm == "head" else (kq, kk)
            c.norm_q, c.norm_k = _vector("norm_q", norms.get("q"), sizes[0]), _vector("norm_k", norms.get("k"), sizes[1])


class Step:
    """A forward step's sequences (a SeqBatch), every token's position, its hidden states h [n, hidden] (updated
    in place by every layer) and the routing outputs of its MoE layers, as cb_step plus the pointers the
    layers share. Checked once here, the validation boundary of the layer calls: layer_forward only compares
    the plan's width and top_k with the step's (no Python call per array)."""

    def __init__(self, seqs, positions, h, top_k):
        if not isinstance(seqs, SeqBatch):
            raise InvalidArgument(f"Step needs a SeqBatch, got {type(seqs).__name__}")
        self.positions = _args.int32s("positions", positions, seqs.n_tok)
        self.seqs, self.n = seqs, seqs.n_tok
        self.h = _args.f32("h", h, 2, (self.n, None), writable=True)
        c = self.c = ffi.new("cb_step *")
        c.n_seqs, c.seq_start, c.pos0 = seqs.n, _args.ptr("int32_t *", seqs.start), _args.ptr("int32_t *", seqs.pos0)
        c.block_tables, c.n_table = seqs.c_tables, _args.ptr("int32_t *", seqs.n_table)
        c.positions = _args.ptr("int32_t *", self.positions)
        self.top_k = int(top_k)
        self.idx = np.empty((self.n, self.top_k), dtype=np.int32)     # one MoE layer's routing at a time
        self.w = np.empty((self.n, self.top_k), dtype=np.float32)
        self._ptrs = (_args.ptr("float *", self.h), _args.ptr("int32_t *", self.idx), _args.ptr("float *", self.w))


def layer_forward(rt, plan, step):
    """Runtime.layer_forward body: step.h updated in place; step.idx / step.w hold the MoE routing of this
    layer (until the next layer's call). plan and step were checked when they were built."""
    if plan.c.hidden != step.h.shape[1] or plan.top_k not in (0, step.top_k):
        raise InvalidArgument(f"layer_forward: the plan (hidden {plan.c.hidden}, top_k {plan.top_k}) does not fit "
                              f"the step (hidden {step.h.shape[1]}, top_k {step.top_k})")
    h, idx, w = step._ptrs
    if not plan.top_k:
        idx = w = ffi.NULL
    with rt._lock:
        e = rt._engine()
        check_status(lib.cb_layer_forward(e, plan.c, step.c, h, step.n, idx, w), "layer_forward", e)
