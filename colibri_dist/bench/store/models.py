"""Expert traces recorded from the oracle tiny models, and the lookahead's recall.

Role in the data flow: part of `python -m colibri_dist.bench store`. A tiny
transformers checkpoint (format/tiny.py) is converted to .colibri and run
through the MoeExecutor as a residual MoE stack (h += moe_l(rmsnorm(h) * n_l), no
attention): each batch's expert union per layer is one trace step. The engine
runs with a small cache and lookahead on, so its stats give the recall of
"next layer's gate on the current hidden states".
"""
import os

import numpy as np


def _rmsnorm(h, weight, eps=1e-5):
    h = h.astype(np.float32)
    return (h / np.sqrt((h * h).mean(axis=1, keepdims=True) + eps) * weight).astype(np.float32)


def _norm_weight(model, layer, hidden):
    for name in (f"model.layers.{layer}.post_attention_layernorm.weight",):
        try:
            return np.asarray(model.tensor(name), dtype=np.float32)
        except Exception:
            pass
    return np.ones(hidden, np.float32)


def record_trace(colibri_path, batches, batch, seed=0, zipf_s=1.2, cache_experts=4):
    """(trace, lookahead predictions, engine stats) for one converted model."""
    from ...moe_executor import MoeExecutor
    rng = np.random.default_rng(seed)
    with MoeExecutor(colibri_path, threads=1, cache_bytes=None) as probe:
        layout = probe.store.source.layout(probe.model.moe_layers[0], 0)
    with MoeExecutor(colibri_path, threads=1, cache_bytes=cache_experts * layout.nbytes, lookahead=True) as eng:
        emb = np.asarray(eng.model.tensor("model.embed_tokens.weight"), dtype=np.float32)
        vocab, hidden = emb.shape
        p = np.arange(1, vocab + 1, dtype=np.float64) ** -zipf_s
        p /= p.sum()
        layers = list(eng.model.moe_layers)
        norms = {l: _norm_weight(eng.model, l, hidden) for l in layers}
        trace, preds = [], []
        for _ in range(batches):
            h = emb[rng.choice(vocab, size=batch, p=p)]
            pending = None
            for i, layer in enumerate(layers):
                x = _rmsnorm(h, norms[layer])
                idx, _ = eng.route(layer, x)
                preds.append(pending)
                trace.append((layer, sorted(int(e) for e in np.unique(idx))))
                if i + 1 < len(layers):
                    nxt = layers[i + 1]
                    pending = (nxt, sorted(int(e) for e in np.unique(eng.route(nxt, x)[0])))
                h = h + eng.moe_forward(layer, x)
        return trace, preds, eng.stats(), eng.config.n_experts, len(layers)


def convert_tiny(family, workdir, scheme="int8"):
    from ...format.convert import convert
    from ...format.tiny import write_tiny
    src = os.path.join(workdir, f"tiny-{family}")
    dst = os.path.join(workdir, f"tiny-{family}-{scheme}.colibri")
    if not os.path.exists(dst):
        write_tiny(family, src)
        convert(src, dst, experts=scheme, progress=False)
    return dst
