"""gpt-oss through the family seam: what its config and checkpoint may carry, and what is refused by name.

The tiny checkpoint's config values reach the container (the clamped SwiGLU's alpha and limit in the
header, every layer MoE, the sliding windows from layer_types, the router bias as the layer's bias entry);
a bad swiglu_limit and bad layer_types are each a FormatError naming the key with nothing written; a damaged
expert_act in the header is refused by the Python and C readers. (The hub's MXFP4 checkpoints:
test_format_gpt_oss_mxfp4.py.)
"""
import json
import shutil
import struct

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import FormatError
from colibri_dist.format.layout import Activation
from colibri_dist.model.arch import architecture
from container_edit import fix_crcs
from test_format_damage import c_open


def _checkpoint(tiny_dir, tmp_path, **changes):
    src, _ = tiny_dir("gpt_oss")
    out = tmp_path / "ckpt"
    shutil.copytree(src, out)
    hf = json.loads((out / "config.json").read_text())
    hf.update(changes)
    (out / "config.json").write_text(json.dumps(hf))
    return out, hf


def test_the_config_reaches_the_container(converted):
    path, hf = converted("gpt_oss", "f32")
    with cd.open_model(path) as m:
        cfg = m.config
        assert cfg.act == Activation("swiglu_oai", np.float32(1.702), 0.5)
        assert cfg.moe_layers == (0, 1) and cfg.gating.kind == "softmax_topk_norm"
        assert np.array_equal(m.correction_bias(1), hf.model.layers[1].mlp.router.bias.detach().numpy())
        layout = m.expert_layout(1, 3)
        assert layout.act == cfg.act and layout.biases is not None
        arch = architecture(cfg.family, m.meta["source_config"])
        assert arch.sinks and arch.qkv_bias and arch.o_bias and arch.windows == (6, 0)
        assert arch.rope.rope_type == "yarn"


@pytest.mark.parametrize("key, value, words", [
    ("swiglu_limit", -1.0, "swiglu_limit=-1.0 is not supported (needs finite values, limit > 0)"),
    ("swiglu_alpha", "fast", "'swiglu_alpha' must be a finite number, got 'fast'"),
    ("layer_types", ["sliding_attention"], "layer_types ['sliding_attention'] must name"),
    ("layer_types", ["sliding_attention", "chunked_attention"], "must name full_attention/sliding_attention"),
])
def test_bad_values_are_named_and_nothing_is_written(tiny_dir, tmp_path, key, value, words):
    src, _ = _checkpoint(tiny_dir, tmp_path, **{key: value})
    dst = tmp_path / "out.colibri"
    with pytest.raises(FormatError) as info:
        cd.convert(src, dst, experts="f32", progress=False)
    assert words in str(info.value) and str(src / "config.json") in str(info.value)
    assert not dst.exists()


def test_layer_types_are_checked_at_load_too(tiny_dir, tmp_path):
    _, hf = _checkpoint(tiny_dir, tmp_path, layer_types=["full_attention", "sliding"])
    with pytest.raises(FormatError, match="layer_types .* must name full_attention/sliding_attention"):
        architecture("gpt_oss", hf)


def test_a_damaged_expert_activation_is_refused_by_both_readers(converted, tmp_path):
    path, _ = converted("gpt_oss", "f32")
    for act, limit in ((7, 0.5), (1, 0.0), (1, float("nan"))):
        bad = tmp_path / f"bad-{act}-{limit}.colibri"
        raw = bytearray(path.read_bytes())
        struct.pack_into("<i", raw, 304, act)
        struct.pack_into("<f", raw, 312, limit)
        bad.write_bytes(fix_crcs(raw))
        with pytest.raises(FormatError, match="bad expert activation expert_act"):
            cd.open_model(bad)
        status, message = c_open(bad)
        assert status != 0 and "invalid expert activation in header" in message
