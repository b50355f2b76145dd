"""Container support for whole models: dense matrices in a chosen scheme, tokenizer files inside,
and a converter that never merges a new model with an old one's hot-added experts."""
import json
import os

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import InvalidArgument
from colibri_dist.format import tiny
from colibri_dist.format.quantize import dequantize

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    tiny.write_tiny("qwen2_moe", d)
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}", "eos_token": "</s>"}))
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 2]}))
    return d


def test_dense_scheme_encodes_attention_and_keeps_norms_float(src, tmp_path):
    dst = tmp_path / "m.colibri"
    cd.convert(src, dst, experts="int8", dense="int8-g32", progress=False)
    with cd.open_model(dst) as m:
        assert m.dense_scheme == "int8-g32"
        blob, layout = m.matrix("model.layers.0.self_attn.q_proj.weight")
        assert layout.dtype == 4 and (layout.rows, layout.cols) == (32, 32)
        w = dequantize(blob, layout)
        assert np.allclose(w, m.tensor("model.layers.0.self_attn.q_proj.weight"))
        assert m.tensor("model.layers.0.input_layernorm.weight").dtype == np.float32
        assert "matrix:int8-g32" in m.bytes_by_dtype()
        m.verify(progress=False)


def test_default_dense_scheme_follows_experts(src, tmp_path):
    dst = tmp_path / "m.colibri"
    cd.convert(src, dst, experts="bf16", progress=False)
    with cd.open_model(dst) as m:
        assert m.dense_scheme == "bf16"
        assert m.matrix("lm_head.weight")[1].dtype == 2


def test_tokenizer_files_travel_inside(src, tmp_path):
    dst = tmp_path / "m.colibri"
    cd.convert(src, dst, experts="f32", progress=False)
    with cd.open_model(dst) as m:
        files = m.tokenizer_files()
    assert json.loads(files["generation_config.json"])["eos_token_id"] == [1, 2]
    assert "chat_template" in json.loads(files["tokenizer_config.json"])


def _hot_add(eng, layer, seed):
    h, rng = eng.config.hidden, np.random.default_rng(seed)
    w = {"gate": rng.standard_normal((16, h)).astype(np.float32),
         "up": rng.standard_normal((16, h)).astype(np.float32),
         "down": rng.standard_normal((h, 16)).astype(np.float32)}
    return eng.add_expert(layer, w, rng.standard_normal(h).astype(np.float32))


def test_existing_destination_is_refused_without_force(src, tmp_path):
    dst = tmp_path / "m.colibri"
    cd.convert(src, dst, experts="f32", progress=False)
    with pytest.raises(InvalidArgument, match="already exist.*--force"):
        cd.convert(src, dst, experts="int8", progress=False)
    with cd.open_model(dst) as m:
        assert m.config.scheme == "f32"       # untouched


def test_force_replaces_model_and_drops_old_hot_added_experts(src, tmp_path):
    dst = tmp_path / "m.colibri"
    cd.convert(src, dst, experts="f32", progress=False)
    with cd.MoeExecutor(dst) as eng:
        added = _hot_add(eng, 0, seed=0)
    assert os.path.isdir(str(dst) + ".experts")
    with pytest.raises(InvalidArgument, match="hot-added experts"):
        cd.convert(src, dst, experts="int8", progress=False)
    cd.convert(src, dst, experts="int8", progress=False, force=True)
    assert not os.path.exists(str(dst) + ".experts")
    assert not [p for p in os.listdir(tmp_path) if ".replaced-" in p]
    with cd.MoeExecutor(dst) as eng:
        assert eng.config.scheme == "int8"
        assert added not in eng.table(0).ids.tolist()


def test_inspect_lists_hot_added_experts(src, tmp_path, capsys):
    from colibri_dist.cli import main
    dst = tmp_path / "m.colibri"
    cd.convert(src, dst, experts="f32", progress=False)
    assert main(["inspect", str(dst)]) == 0
    assert "hot-added experts: none" in capsys.readouterr().out
    with cd.MoeExecutor(dst) as eng:
        e = _hot_add(eng, 1, seed=1)
    assert main(["inspect", str(dst), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["hot_added"] == {"1": {"added": [e], "removed": []}}
