"""The dense (non-expert) math of the token classifier, in float32 numpy, batch-invariant.

Role in the data flow: token_classification.py runs embeddings, RMSNorm and the
class head here and only the MoE layers on the executor. Every reduction runs
along the contiguous last axis of one row (numpy's per-row pairwise sum, no
BLAS), so a token's bits never depend on which batch it sits in.
"""
import numpy as np

from ..errors import FormatError


def rmsnorm(x, weight, eps):
    x = np.asarray(x, dtype=np.float32)
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    return (x / np.sqrt(ms + np.float32(eps))) * weight


def linear_rows(x, weight, bias=None):
    """x[n, h] @ weight[c, h]^T (+ bias) without BLAS: one fixed-order sum per output element."""
    out = np.sum(x[:, None, :] * weight[None, :, :], axis=-1, dtype=np.float32)
    return out + bias if bias is not None else out


def softmax_rows(logits):
    z = logits - np.max(logits, axis=-1, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=-1, keepdims=True)


class ClassifierHead:
    """The dense tensors of a demo-shaped classifier (Mixtral names, see docs/ARCHITECTURE.md)."""

    def __init__(self, model, model_path, eps):
        self.path = model_path
        self.eps = np.float32(eps)
        names = set(_tensor_names(model))
        attention = sorted(n for n in names if ".self_attn." in n)
        if attention:
            raise FormatError(f"{model_path}: token-classification runs attention-free MoE classifiers "
                              f"(embeddings, MoE layers, head); this model has attention tensors such as "
                              f"{attention[0]}")
        self.embed = self._get(model, names, "model.embed_tokens.weight")
        self.layer_norms = {l: self._get(model, names, f"model.layers.{l}.post_attention_layernorm.weight")
                            for l in model.moe_layers}
        self.final_norm = self._get(model, names, "model.norm.weight")
        self.score = self._get(model, names, "score.weight")
        self.score_bias = self._get(model, names, "score.bias") if "score.bias" in names else None
        self.vocab_size, self.hidden = self.embed.shape
        self.classes = self.score.shape[0]

    def _get(self, model, names, name):
        if name not in names:
            raise FormatError(f"{self.path}: token-classification needs tensor {name} "
                              f"(a demo-shaped classifier: embeddings, MoE layers with norms, `score` head)")
        return np.ascontiguousarray(model.tensor(name), dtype=np.float32)

    def embed_ids(self, ids):
        return self.embed[ids]

    def probs(self, h):
        x = rmsnorm(h, self.final_norm, self.eps)
        return softmax_rows(linear_rows(x, self.score, self.score_bias))


def rms_norm_eps(model):
    """The model's RMSNorm epsilon: from the converted container's source config.json (default 1e-5)."""
    extra = getattr(model.config, "extra", None) or {}
    value = extra.get("rms_norm_eps", (extra.get("source_config") or {}).get("rms_norm_eps"))
    return 1e-5 if value is None else float(value)


def _tensor_names(model):
    names = model.tensor_names
    return names() if callable(names) else names
