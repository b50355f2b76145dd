"""Whole-model quality of each 4-bit mode: logits cosine and top-1 agreement vs the fp32 transformers model.

Role: the `model_quality` section of `python -m colibri_dist.bench kernels` (item 5 of issue 18:
which mode should be the default). For each of the five tiny oracle families (format/tiny.py)
the checkpoint is converted per (experts, dense) preset and run through LLM.logits on one
prompt, weight-only (w8a8=False) and with the switch on (w8a8=True: w8a8 for int8 matrices,
w4a8 for int4), next to the fp32 model's logits. No thresholds: tests gate quality.
"""
import os
import tempfile

import numpy as np

PRESETS = [("int8", "int8"), ("int4-g32", "int8"), ("int4-g64", "int8"), ("int4-g64", "int4-g64")]


def _cos(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def model_quality(presets=PRESETS, n_tokens=48, seed=3, families=None):
    """[{family, experts, dense, w8a8, cosine, top1}] per family x preset x switch."""
    import torch

    from ...format.convert import convert
    from ...format.tiny import FAMILIES, write_tiny
    from ...model.llm import LLM
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in families or FAMILIES:
            src = os.path.join(tmp, family, "src")
            hf = write_tiny(family, src)
            ids = np.random.default_rng(seed).integers(0, hf.config.vocab_size, n_tokens).astype(np.int64)
            with torch.no_grad():
                ref = hf(torch.from_numpy(ids)[None]).logits[0].float().numpy()
            for experts, dense in presets:
                dst = os.path.join(tmp, family, f"{experts}_{dense}.colibri")
                convert(src, dst, experts=experts, dense=dense, progress=False)
                for w8a8 in (False, True):
                    with LLM(dst, threads=1, w8a8=w8a8) as llm:
                        got = llm.logits(ids.tolist())
                    rows.append({"family": family, "experts": experts, "dense": dense, "w8a8": w8a8,
                                 "cosine": _cos(got, ref), "top1": float(np.mean(got.argmax(1) == ref.argmax(1)))})
    return rows


def model_quality_markdown(rows):
    """cosine / top-1 per family (columns) and preset x mode (rows)."""
    fams = list(dict.fromkeys(r["family"] for r in rows))
    keys = list(dict.fromkeys((r["experts"], r["dense"], r["w8a8"]) for r in rows))
    out = "| experts / dense | mode | " + " | ".join(fams) + " |\n|---|---|" + "---|" * len(fams) + "\n"
    for e, d, w in keys:
        cells = [next(f"{r['cosine']:.5f} / {r['top1']:.3f}" for r in rows
                      if (r["family"], r["experts"], r["dense"], r["w8a8"]) == (f, e, d, w)) for f in fams]
        mode = ("w4a8" if e.startswith("int4") else "w8a8") + (" (+w8a8 dense)" if d == "int8" and e != "int8" else "")
        out += f"| {e} / {d} | {mode if w else 'weight-only'} | " + " | ".join(cells) + " |\n"
    return out
