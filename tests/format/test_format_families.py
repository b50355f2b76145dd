"""The family table (colibri_dist/families/) is the only place that knows a family.

The readers (format/, model/) name no family; every entry's builders work on its own tiny configs and
name a gating kind of the one table; an unknown model_type (or a non-string one) is a FormatError
listing the supported families.
"""
import ast
import pathlib

import pytest

import colibri_dist
from colibri_dist import families
from colibri_dist.errors import FormatError
from colibri_dist.format.families import detect, model_config
from colibri_dist.format.gating_spec import BY_NAME

ROOT = pathlib.Path(colibri_dist.__file__).parent


def test_format_and_model_name_no_family():
    bad = []
    for room in ("format", "model"):
        for path in sorted((ROOT / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value in families.FAMILIES:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not bad, "family-specific code outside colibri_dist/families/:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", sorted(families.FAMILIES))
def test_every_entry_builds_from_its_tiny_configs(name):
    transformers = pytest.importorskip("transformers")
    fam = families.FAMILIES[name]
    assert fam.tiny and fam.cases, "an entry carries its tiny MoE-block config and whole-model cases"
    for cls_name, kwargs in [fam.tiny] + list(fam.cases.values()):
        hf = getattr(transformers, cls_name)(**kwargs).to_dict()
        assert detect(hf) is fam
        cfg = model_config(fam, hf, "f32")
        assert cfg.family == name and cfg.gating.kind in BY_NAME and cfg.moe_layers
        att = fam.attention(hf, cfg.n_layers, "config.json")
        assert att.qk_norm in ("none", "head", "full")
        assert att.windows is None or len(att.windows) == cfg.n_layers


@pytest.mark.parametrize("model_type", ["gpt2", None, ["mixtral"], "_base"])
def test_an_unknown_model_type_lists_the_supported_families(model_type):
    with pytest.raises(FormatError) as info:
        detect({"model_type": model_type, "architectures": ["X"]}, "dir/config.json")
    assert str(info.value) == (f"dir/config.json: unsupported architecture model_type={model_type!r} ['X']; "
                               f"supported: {', '.join(sorted(families.FAMILIES))}")


def test_glm4_moe_mtp_layer_is_not_converted(tiny_dir, tmp_path):
    # GLM-4.5 checkpoints carry model.layers.{num_hidden_layers}.* (the MTP module transformers ignores)
    import shutil

    import numpy as np
    from safetensors.numpy import save_file

    import colibri_dist as cd
    src, _ = tiny_dir("glm4_moe")
    ckpt = tmp_path / "ckpt"
    shutil.copytree(src, ckpt)
    extra = {"model.layers.2.self_attn.q_proj.weight": np.ones((32, 32), np.float32),
             "model.layers.2.eh_proj.weight": np.ones((32, 64), np.float32),
             "model.layers.12.mlp.experts.0.up_proj.weight": np.ones((16, 32), np.float32)}
    save_file(extra, str(ckpt / "model-mtp.safetensors"))
    cd.convert(ckpt, tmp_path / "m.colibri", experts="f32", progress=False)
    with cd.open_model(tmp_path / "m.colibri") as m:
        names = set(m.tensor_names())
    assert not {n for n in names if n.startswith(("model.layers.2.", "model.layers.12."))}
    assert "model.layers.1.self_attn.q_proj.weight" in names and "model.norm.weight" in names
