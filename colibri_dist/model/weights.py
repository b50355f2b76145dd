"""LayerWeights / ModelWeights: the dense weights of a whole model as kernel-ready views.

Role in the data flow: the LLM builds these once from the container (format reader), under the
tensor names of the family's table entry (arch.names, colibri_dist/families/): encoded
matrices (attention projections, lm_head) as zero-copy native MatrixViews into the mmap, norms,
biases and attention sinks as float32 arrays, dense MLP layers as ExpertViews; for DeepSeek MLA the per-head
absorbed matrices W_kb^T [kv_lora, nope] and W_vb [v, kv_lora] are row ranges of k_b_proj / v_b_proj in their
own encoding when the container has them (a GGUF's split attn_k_b / attn_v_b), else decoded once from kv_b_proj.
Missing attention tensors (an MoE-layer-only container) are a FormatError naming the tensor.
"""
from dataclasses import dataclass, field

import numpy as np

from ..errors import FormatError, InvalidArgument
from ..format.quantize import pack_expert
from .. import native


def _prefix(layer):
    return f"model.layers.{layer}."


class _Reader:
    """Name -> view helpers over one open format.reader.Model, with clear errors."""

    def __init__(self, model):
        self.model = model

    def need(self, name):
        if not self.model.has_tensor(name):
            raise FormatError(f"{self.model.path}: tensor {name!r} is missing: the container has no whole-model "
                              f"weights (converted from an MoE-layer-only file or an older colibri?)")
        return name

    def matrix(self, name):
        blob, layout = self.model.matrix(self.need(name))
        return native.matrix_view(blob, layout)

    def vector(self, name, size=None, required=True):
        if not required and not self.model.has_tensor(name):
            return None
        v = self.model.tensor_f32(self.need(name)).reshape(-1)
        if size is not None and v.size != size:
            raise FormatError(f"{self.model.path}: tensor {name!r} has {v.size} values, expected {size}")
        return np.ascontiguousarray(v, dtype=np.float32)

    def dense_mlp(self, layer, module="mlp"):
        found = self.model.dense_mlp(layer)
        if found is not None:
            return native.expert_view(*found)
        names = [f"{_prefix(layer)}{module}.{p}_proj.weight" for p in ("gate", "up", "down")]
        mats = [self.model.tensor_f32(self.need(n)) for n in names]   # older containers: raw tensors
        return native.expert_view(*pack_expert(mats[0], mats[1], mats[2], "f32"))


@dataclass
class LayerWeights:
    ln_attn: np.ndarray
    ln_mlp: np.ndarray
    mats: dict                      # q, k, v, o (GQA) or q / q_a, q_b, kv_a, o (MLA): MatrixView
    biases: dict = field(default_factory=dict)
    norms: dict = field(default_factory=dict)   # q_norm, k_norm (GQA) or q_a, kv_a (MLA)
    mla_kb_t: list = None           # per head MatrixView [kv_lora, nope]
    mla_vb: list = None             # per head MatrixView [v, kv_lora]
    mlp: object = None              # ExpertView of a dense layer (None for MoE layers)
    sinks: np.ndarray = None        # float32 [n_heads] attention sinks (gpt-oss), else None


def load_layer(model, arch, layer, moe):
    r, p, names = _Reader(model), _prefix(layer), arch.names
    lw = LayerWeights(ln_attn=r.vector(f"{p}{names.input_norm}.weight", arch.hidden),
                      ln_mlp=r.vector(f"{p}{names.post_attn_norm}.weight", arch.hidden), mats={})
    a = f"{p}{names.attn}."
    if arch.mla:
        _load_mla(r, arch, a, lw)
    else:
        for part in "qkvo":
            lw.mats[part] = r.matrix(f"{a}{part}_proj.weight")
        if arch.qkv_bias:
            for part in "qkv":
                lw.biases[part] = r.vector(f"{a}{part}_proj.bias", lw.mats[part].rows)
        if arch.o_bias:
            lw.biases["o"] = r.vector(f"{a}o_proj.bias", arch.hidden)
        if arch.qk_norm != "none":
            sizes = (arch.head_dim, arch.head_dim) if arch.qk_norm == "head" else \
                (lw.mats["q"].rows, lw.mats["k"].rows)
            lw.norms["q"] = r.vector(a + "q_norm.weight", sizes[0])
            lw.norms["k"] = r.vector(a + "k_norm.weight", sizes[1])
        if arch.sinks:
            lw.sinks = r.vector(a + "sinks", arch.n_heads)
    _check_shapes(model, arch, layer, lw)
    if not moe:
        lw.mlp = r.dense_mlp(layer, names.dense_mlp)
    return lw


def _load_mla(r, arch, a, lw):
    m = arch.mla
    if m.q_lora_rank:
        lw.mats["q_a"], lw.mats["q_b"] = r.matrix(a + "q_a_proj.weight"), r.matrix(a + "q_b_proj.weight")
        lw.norms["q_a"] = r.vector(a + "q_a_layernorm.weight", m.q_lora_rank)
        lw.biases["q_a"] = r.vector(a + "q_a_proj.bias", m.q_lora_rank, required=False)
    else:
        lw.mats["q"] = r.matrix(a + "q_proj.weight")
    lw.mats["kv_a"], lw.mats["o"] = r.matrix(a + "kv_a_proj_with_mqa.weight"), r.matrix(a + "o_proj.weight")
    lw.biases["kv_a"] = r.vector(a + "kv_a_proj_with_mqa.bias", m.kv_lora_rank + m.qk_rope_head_dim, required=False)
    lw.biases["o"] = r.vector(a + "o_proj.bias", arch.hidden, required=False)
    lw.norms["kv_a"] = r.vector(a + "kv_a_layernorm.weight", m.kv_lora_rank)
    if r.model.has_tensor(a + "k_b_proj.weight"):     # the split form: each head's rows, as encoded
        lw.mla_kb_t = _heads(r, a + "k_b_proj.weight", arch.n_heads, m.kv_lora_rank, m.qk_nope_head_dim)
        lw.mla_vb = _heads(r, a + "v_b_proj.weight", arch.n_heads, m.v_head_dim, m.kv_lora_rank)
        return
    kv_b = r.model.tensor_f32(r.need(a + "kv_b_proj.weight"))
    per = m.qk_nope_head_dim + m.v_head_dim
    if kv_b.shape != (arch.n_heads * per, m.kv_lora_rank):
        raise FormatError(f"{r.model.path}: {a}kv_b_proj.weight has shape {list(kv_b.shape)}, expected "
                          f"[{arch.n_heads * per}, {m.kv_lora_rank}]")
    heads = kv_b.reshape(arch.n_heads, per, m.kv_lora_rank)
    lw.mla_kb_t = [native.matrix_from_array(np.ascontiguousarray(h[:m.qk_nope_head_dim].T)) for h in heads]
    lw.mla_vb = [native.matrix_from_array(np.ascontiguousarray(h[m.qk_nope_head_dim:])) for h in heads]


def _heads(r, name, n_heads, rows, cols):
    """n_heads MatrixViews [rows, cols]: the row ranges of matrix `name` [n_heads * rows, cols]."""
    view = r.matrix(name)
    if (view.rows, view.cols) != (n_heads * rows, cols):
        raise FormatError(f"{r.model.path}: {name} has shape [{view.rows}, {view.cols}], expected "
                          f"[{n_heads * rows}, {cols}] ({n_heads} heads of [{rows}, {cols}])")
    return native.split_rows(view, n_heads)


def _check_shapes(model, arch, layer, lw):
    want = {}
    if arch.mla:
        m = arch.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            want.update(q_a=(m.q_lora_rank, arch.hidden), q_b=(arch.n_heads * qk, m.q_lora_rank))
        else:
            want["q"] = (arch.n_heads * qk, arch.hidden)
        want.update(kv_a=(m.kv_lora_rank + m.qk_rope_head_dim, arch.hidden), o=(arch.hidden, arch.n_heads * m.v_head_dim))
    else:
        hd = arch.head_dim
        want = dict(q=(arch.n_heads * hd, arch.hidden), k=(arch.n_kv_heads * hd, arch.hidden),
                    v=(arch.n_kv_heads * hd, arch.hidden), o=(arch.hidden, arch.n_heads * hd))
    for part, shape in want.items():
        got = (lw.mats[part].rows, lw.mats[part].cols)
        if got != shape:
            raise FormatError(f"{model.path}: layer {layer} attention {part} projection is {list(got)}, "
                              f"expected {list(shape)} from the config")


@dataclass
class ModelWeights:
    embed: object                   # MatrixView [vocab, hidden] (gathered rows)
    final_norm: np.ndarray
    lm_head: object                 # MatrixView [vocab, hidden]
    layers: list


def load_weights(model, arch):
    r = _Reader(model)
    embed = r.matrix("model.embed_tokens.weight")
    head_name = "lm_head.weight" if model.has_tensor("lm_head.weight") or not arch.tie_embeddings \
        else "model.embed_tokens.weight"
    lm_head = r.matrix(head_name)
    for name, view in (("model.embed_tokens.weight", embed), (head_name, lm_head)):
        if (view.rows, view.cols) != (arch.vocab_size, arch.hidden):
            raise FormatError(f"{model.path}: {name} is [{view.rows}, {view.cols}], expected "
                              f"[{arch.vocab_size}, {arch.hidden}]")
    moe = set(model.moe_layers)
    layers = [load_layer(model, arch, i, i in moe) for i in range(arch.n_layers)]
    return ModelWeights(embed, r.vector("model.norm.weight", arch.hidden), lm_head, layers)


def check_ids(ids, vocab, what="token ids"):
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size == 0:
        raise InvalidArgument(f"{what}: expected a non-empty 1-D list of token ids, got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise InvalidArgument(f"{what}: token ids must be integers, got {ids.dtype}")
    bad = np.flatnonzero((ids < 0) | (ids >= vocab))
    if bad.size:
        raise InvalidArgument(f"{what}: token id {int(ids[bad[0]])} at position {int(bad[0])} is outside the "
                              f"vocabulary 0..{vocab - 1}")
    return ids.astype(np.int32)
