"""A pure numpy reference of the demo classifier, read from the converted `.colibri` model.

Role in the data flow: the test oracle for `colibri run` (token-classification):
it dequantizes every expert with format.quantize.dequantize and runs
    h = E[ids]; per MoE layer: h = h + moe(rmsnorm(h) * n); probs = softmax(rmsnorm(h) * n @ S^T + b)
in float64 (or float32) with plain numpy, sharing no code with the job path
(dense.py) or the native kernels. Gating: softmax over router logits, top-k
with ties to the lower expert index, weights renormalised (Mixtral).
"""
import numpy as np

from ..format.quantize import dequantize


def _rms_norm_eps(config):
    """The converted container's source config.json value (default 1e-5): read here, not through the job code."""
    extra = getattr(config, "extra", None) or {}
    value = extra.get("rms_norm_eps", (extra.get("source_config") or {}).get("rms_norm_eps"))
    return 1e-5 if value is None else float(value)


class ReferenceClassifier:
    def __init__(self, model, dtype=np.float64):
        self.dtype = dtype
        t = lambda name: np.asarray(model.tensor(name), dtype=dtype)   # noqa: E731
        self.eps = _rms_norm_eps(model.config)
        self.top_k = model.config.top_k
        self.embed = t("model.embed_tokens.weight")
        self.final_norm = t("model.norm.weight")
        self.score, self.score_bias = t("score.weight"), t("score.bias")
        self.layers = []
        for layer in model.moe_layers:
            experts = [self._expert(model, layer, e) for e in range(model.config.n_experts)]
            self.layers.append((t(f"model.layers.{layer}.post_attention_layernorm.weight"),
                                np.asarray(model.router(layer), dtype=dtype), experts))

    def _expert(self, model, layer, e):
        blob, lay = model.read_expert(layer, e), model.expert_layout(layer, e)
        return tuple(dequantize(blob, m).astype(self.dtype) for m in (lay.gate, lay.up, lay.down))

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def route(self, x, router):
        logits = x @ router.T
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        idx = np.argsort(-p, axis=1, kind="stable")[:, :self.top_k]
        w = np.take_along_axis(p, idx, axis=1)
        return idx, w / w.sum(axis=1, keepdims=True)

    def moe(self, x, router, experts):
        idx, w = self.route(x, router)
        y = np.zeros_like(x)
        for e, (gate, up, down) in enumerate(experts):
            rows, slots = np.nonzero(idx == e)
            if len(rows):
                xe = x[rows]
                a, b = xe @ gate.T, xe @ up.T
                y[rows] += w[rows, slots, None] * ((a / (1.0 + np.exp(-a)) * b) @ down.T)
        return y

    def probs(self, ids):
        h = self.embed[np.asarray(ids)]
        for norm, router, experts in self.layers:
            h = h + self.moe(self.rmsnorm(h, norm), router, experts)
        logits = self.rmsnorm(h, self.final_norm) @ self.score.T + self.score_bias
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)


def reference_probs(model_path, ids, dtype=np.float64):
    """Open a .colibri and return the reference class probabilities [n_tokens, classes]."""
    from ..format.reader import open_model
    with open_model(model_path) as model:
        return ReferenceClassifier(model, dtype).probs(ids)
