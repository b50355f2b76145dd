"""native/examples/classify (C, no Python inside) on the demo model vs a numpy forward of the same container."""
import re
import shutil
import subprocess

import numpy as np
import pytest

from colibri_dist.format.quantize import dequantize
from native_helpers import ffn_ref

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                                reason="needs make and a C compiler")
ROOT = __file__.rsplit("/tests/", 1)[0]
IDS = [3, 17, 42, 100, 255]


def _rmsnorm(x, w, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _numpy_forward(path, ids):
    from colibri_dist.format.reader import open_model
    from colibri_dist.routing.gating import route_reference
    m = open_model(path)
    try:
        cfg = m.config
        h = m.tensor("model.embed_tokens.weight")[ids].astype(np.float64)
        for layer in range(cfg.n_layers):
            a = _rmsnorm(h, m.tensor(f"model.layers.{layer}.post_attention_layernorm.weight"))
            idx, w = route_reference((a @ m.router(layer).T.astype(np.float64)).astype(np.float32), cfg.gating)
            lay = m.expert_layout(layer)
            y = np.zeros_like(h)
            for t in range(len(ids)):
                for j in range(cfg.top_k):
                    blob = np.asarray(m.expert_blob(layer, int(idx[t, j])))
                    mats = [dequantize(blob, getattr(lay, n)) for n in ("gate", "up", "down")]
                    y[t] += w[t, j] * ffn_ref(a[t:t + 1], *mats)[0]
            h = h + y
        z = _rmsnorm(h, m.tensor("model.norm.weight")) @ m.tensor("score.weight").T + m.tensor("score.bias")
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    finally:
        m.close()


def test_classify_example_runs_the_demo_model(tmp_path):
    from colibri_dist.config import DemoConfig
    from colibri_dist.demos.classifier import ensure_demo
    model = ensure_demo(DemoConfig(cache_dir=str(tmp_path), layers=2), log=lambda *a: None).model
    subprocess.run(["make", "-s", "-j2", "-C", f"{ROOT}/native", "example"], check=True, capture_output=True, timeout=300)
    proc = subprocess.run([f"{ROOT}/native/examples/classify", model, "--verify", *map(str, IDS)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert len(re.findall(r"^layer \d+ routing:", proc.stdout, re.M)) == 2
    probs = np.array([[float(v) for v in line.split()] for line in
                      re.findall(r"^token \d+ probs: ([\d. ]+?)\s+->", proc.stdout, re.M)])
    ref = _numpy_forward(model, IDS)
    assert probs.shape == (len(IDS), 5)
    np.testing.assert_allclose(probs, ref, atol=2e-4)          # printed with 4 decimals
    bad = subprocess.run([f"{ROOT}/native/examples/classify", model, "999999"], capture_output=True, text=True)
    assert bad.returncode == 2 and "outside" in bad.stderr
    missing = subprocess.run([f"{ROOT}/native/examples/classify", str(tmp_path / "nope.colibri"), "1"],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "nope.colibri" in missing.stderr
