"""One layer's attention on a batch of sequences: projections, QK-norm, rope, cache write, attention, o_proj.

Role in the data flow: decoder.py calls attend(...) per layer with the normed hidden rows of every
token of the step and the step's Batch (which sequence each token belongs to, positions, block
tables). Every op is a native call that is row-wise or (attention) per (token, head), so a token's
output does not depend on the other tokens of the step. GQA covers Mixtral, Qwen2/3-MoE, OLMoE, GLM-4.5 and
gpt-oss (sliding windows per layer, per-head sinks in the softmax);
MLA (DeepSeek-V3) caches the compressed latent [c_kv | k_rope] and attends in the absorbed form:
q_lat = W_kb^T q_nope per head, scores against the latent, values W_vb (sum_j p_j c_j).
"""
from dataclasses import dataclass

import numpy as np

from .. import native
from .arch import kv_row_dims


@dataclass
class Batch:
    seq_start: np.ndarray    # int32 [S+1]: tokens of sequence s are rows seq_start[s]:seq_start[s+1]
    pos0: np.ndarray         # int32 [S]: position of each sequence's first new token
    positions: np.ndarray    # int32 [n]
    tables: list             # S int32 block tables
    seqs: object = None      # native.SeqBatch of the three above, built once per step for every layer

    def __post_init__(self):
        self.seqs = native.seq_batch(self.seq_start, self.pos0, self.tables)

    @property
    def n(self):
        return int(self.positions.size)


def attn_spec(arch, layer, cache):
    k_row, v_row, v_dim = kv_row_dims(arch)
    return native.AttnSpec(arch.n_heads, 1 if arch.mla else arch.n_kv_heads, k_row, v_dim, v_row,
                           cache.block_size, cache.dtype, arch.windows[layer], arch.scale)


def _rope(arch, x, batch, offset=0):
    r = arch.rope
    native.rope_apply(x, batch.positions, r.rot_dim, r.inv_freq, attention_factor=r.attention_factor,
                      interleaved=r.interleaved, offset=offset)


def attend(rt, arch, layer, lw, x, batch, cache, spec):
    if arch.mla:
        heads = _mla(rt, arch, layer, lw, x, batch, cache, spec)
    else:
        heads = _gqa(rt, arch, layer, lw, x, batch, cache, spec)
    return rt.matmul(np.ascontiguousarray(heads.reshape(batch.n, -1)), lw.mats["o"], lw.biases.get("o"))


def _gqa(rt, arch, layer, lw, x, batch, cache, spec):
    n, hd = batch.n, arch.head_dim
    q, k, v = rt.matmul_many(x, [lw.mats["q"], lw.mats["k"], lw.mats["v"]],
                             [lw.biases.get("q"), lw.biases.get("k"), lw.biases.get("v")])
    if arch.qk_norm == "full":                       # OLMoE: over the whole projection, before clipping
        q, k = native.rmsnorm(q, lw.norms["q"], arch.rms_eps), native.rmsnorm(k, lw.norms["k"], arch.rms_eps)
    if arch.clip_qkv:
        for t in (q, k, v):
            np.clip(t, -arch.clip_qkv, arch.clip_qkv, out=t)
    if arch.qk_norm == "head":                       # Qwen3-MoE: per head
        q = native.rmsnorm(q.reshape(n * arch.n_heads, hd), lw.norms["q"], arch.rms_eps)
        k = native.rmsnorm(k.reshape(n * arch.n_kv_heads, hd), lw.norms["k"], arch.rms_eps)
    q = np.ascontiguousarray(q.reshape(n, arch.n_heads, hd))
    k = np.ascontiguousarray(k.reshape(n, arch.n_kv_heads, hd))
    v = np.ascontiguousarray(v.reshape(n, arch.n_kv_heads, hd))
    _rope(arch, q, batch)
    _rope(arch, k, batch)
    native.kv_write(spec, cache.k[layer], cache.v[layer], batch.seqs, None, None, k, v)
    return rt.attention(spec, cache.k[layer], cache.v[layer], batch.seqs, None, None, q, sinks=lw.sinks)


def _mla(rt, arch, layer, lw, x, batch, cache, spec):
    m, n, H = arch.mla, batch.n, arch.n_heads
    nope, rope = m.qk_nope_head_dim, m.qk_rope_head_dim
    if m.q_lora_rank:
        qa = native.rmsnorm(rt.matmul(x, lw.mats["q_a"], lw.biases.get("q_a")), lw.norms["q_a"], arch.rms_eps)
        q = rt.matmul(qa, lw.mats["q_b"])
    else:
        q = rt.matmul(x, lw.mats["q"])
    q = np.ascontiguousarray(q.reshape(n, H, nope + rope))
    ckv = rt.matmul(x, lw.mats["kv_a"], lw.biases.get("kv_a"))
    row = np.empty((n, 1, m.kv_lora_rank + rope), dtype=np.float32)
    row[:, 0, :m.kv_lora_rank] = native.rmsnorm(np.ascontiguousarray(ckv[:, :m.kv_lora_rank]), lw.norms["kv_a"],
                                                arch.rms_eps)
    row[:, 0, m.kv_lora_rank:] = ckv[:, m.kv_lora_rank:]
    _rope(arch, q, batch, offset=nope)
    _rope(arch, row, batch, offset=m.kv_lora_rank)
    native.kv_write(spec, cache.k[layer], None, batch.seqs, None, None, row)
    q_lat = rt.matmul_heads(q, lw.mla_kb_t, H, nope, offset=0)          # [n, H, kv_lora]
    qq = np.empty((n, H, m.kv_lora_rank + rope), dtype=np.float32)
    qq[:, :, :m.kv_lora_rank] = q_lat
    qq[:, :, m.kv_lora_rank:] = q[:, :, nope:]
    o_lat = rt.attention(spec, cache.k[layer], cache.k[layer], batch.seqs, None, None, qq)
    return rt.matmul_heads(np.ascontiguousarray(o_lat), lw.mla_vb, H, m.kv_lora_rank, offset=0)
