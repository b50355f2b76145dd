"""Weight-scheme quality on the oracle models: cosine of our MoE layer to the fp32 transformers block.

Role: the quality half of `python -m colibri_dist.bench kernels` (docs/KERNELS.md table).
For each of the five families, the tiny checkpoint of the format oracle tests
(format/tiny.py) is converted once per scheme; the last MoE layer runs on random
hidden states in our engine (weight-only, and with the w8a8 switch: w8a8 for "int8",
w4a8 for int4) and in the fp32
block `model.model.layers[L].mlp` itself. No thresholds: the tests gate quality.
"""
import os
import tempfile

import numpy as np

from ...encodings import BY_NAME, SCALE_SUPER
from ...format.convert import convert
from ...format.reader import open_model
from ...format.layout import SCHEMES
from ...format.tiny import FAMILIES, write_tiny
from ...native import Runtime, expert_view


def _cosine(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _layer(model, layer):
    """(router, gating, expert views, bias, shared view, shared gate) of one MoE layer, from the container."""
    cfg, lay = model.config, model.expert_layout(layer)
    views = [expert_view(model.expert_blob(layer, e), lay) for e in range(cfg.n_experts)]
    shared = model.shared_expert(layer)
    return (model.router(layer), cfg.gating, views, model.correction_bias(layer),
            expert_view(*shared) if shared is not None else None, model.shared_gate(layer))


def _ours(path, x, w8a8):
    model = open_model(path)
    try:
        layer = model.moe_layers[-1]
        router, gating, views, bias, shared, sgate = _layer(model, layer)
        with Runtime(threads=1, w8a8=w8a8) as rt:
            return layer, rt.moe_forward(x, router, gating, views, bias=bias, shared=shared, shared_gate=sgate)[0]
    finally:
        model.close()


def oracle_quality(schemes=None, n_tokens=64, seed=13):
    """[{family, scheme, cosine, rms_err_rel}] for every family x scheme (+ "int8+w8a8", "int4-g*+w4a8",
    "int6-g64+w6a8")."""
    import torch
    # llama.cpp's blocks (scale kind SUPER) need sizes in whole blocks the tiny checkpoints lack: quality_bench has them
    schemes = list(schemes or [s for s in SCHEMES if BY_NAME[s].scale_kind != SCALE_SUPER]) + \
        ["int8+w8a8", "int4-g32+w4a8", "int4-g64+w4a8", "int6-g64+w6a8"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in FAMILIES:
            hf = write_tiny(family, os.path.join(tmp, family, "src"))
            x = np.random.default_rng(seed).standard_normal((n_tokens, hf.config.hidden_size)).astype(np.float32)
            for scheme in schemes:
                base = scheme.split("+")[0]
                dst = os.path.join(tmp, family, f"{base}.colibri")
                if not os.path.exists(dst):
                    convert(os.path.join(tmp, family, "src"), dst, experts=base, progress=False)
                layer, y = _ours(dst, x, "+" in scheme)
                with torch.no_grad():
                    ref = hf.model.layers[layer].mlp(torch.from_numpy(x)[None])[0].numpy()
                rows.append({"family": family, "scheme": scheme, "cosine": _cosine(y, ref),
                             "rms_err_rel": float(np.sqrt(((y - ref) ** 2).mean() / (ref ** 2).mean()))})
    return rows
