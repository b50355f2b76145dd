"""Config values and metadata are checked against each other (issue 21 items 3, 14, 16): an
activation the FFN does not compute, a typo'd value ("128k", "none") and a metadata/table
disagreement are each one FormatError naming the key (and both sides), at convert and at load,
in the Python reader and in the C parser."""
import json
import shutil

import pytest

import colibri_dist as cd
from colibri_dist.errors import FormatError
from colibri_dist.format.config_values import check_config
from container_edit import find, fix_crcs, header, set_entry, set_meta
from test_format_damage import c_open


def _checkpoint(tiny_dir, tmp_path, **changes):
    src, _ = tiny_dir("mixtral")
    out = tmp_path / "ckpt"
    shutil.copytree(src, out)
    hf = json.loads((out / "config.json").read_text())
    hf.update(changes)
    (out / "config.json").write_text(json.dumps(hf))
    return out


@pytest.mark.parametrize("key, value, words", [
    ("hidden_act", "gelu", "'hidden_act' is 'gelu'"),
    ("hidden_act", "relu", "'hidden_act' is 'relu'"),
    ("max_position_embeddings", "128k", "'max_position_embeddings' must be an integer, got '128k'"),
    ("sliding_window", "none", "'sliding_window' must be an integer, got 'none'"),
    ("rms_norm_eps", "1e-5", "'rms_norm_eps' must be a finite number, got '1e-5'"),
    ("tie_word_embeddings", "no", "'tie_word_embeddings' must be true or false, got 'no'"),
    ("rope_scaling", {"rope_type": "linear", "factor": "4x"}, "'rope_scaling.factor' must be a finite number"),
    # issue 31 defect 11: values of the right type that no model can run converted, then failed at load
    ("rms_norm_eps", -1, "'rms_norm_eps' must be in (0, 1), got -1"),
    ("partial_rotary_factor", 0, "'partial_rotary_factor' must be in (0, 1], got 0"),
    ("partial_rotary_factor", 1.5, "'partial_rotary_factor' must be in (0, 1], got 1.5"),
    ("head_dim", 7, "'head_dim' must be a positive even integer (rotary pairs), got 7"),
    ("routed_scaling_factor", 1e39, "'routed_scaling_factor' must be in (0, 10000], got 1e+39"),
    ("first_k_dense_replace", 2, "'first_k_dense_replace' is 2, not below num_hidden_layers 2"),
])
def test_convert_refuses_bad_config_values_naming_the_key(tiny_dir, tmp_path, key, value, words):
    src = _checkpoint(tiny_dir, tmp_path, **{key: value})
    dst = tmp_path / "out.colibri"
    with pytest.raises(FormatError) as info:
        cd.convert(src, dst, experts="f32", progress=False)
    assert words in str(info.value) and "config.json" in str(info.value), str(info.value)
    assert not dst.exists()


def test_good_configs_pass_the_value_checks(tiny_dir):
    from colibri_dist.format.tiny import FAMILIES
    for family in FAMILIES:
        src, _ = tiny_dir(family)
        check_config(json.loads((src / "config.json").read_text()))     # raises on a false alarm
    check_config({"hidden_act": "swish", "sliding_window": None, "rope_theta": 1e6})


@pytest.fixture
def raw_model(converted, tmp_path):
    path, _ = converted("mixtral", "f32")
    raw = bytearray(open(path, "rb").read())
    meta = json.loads(bytes(raw[header(raw)["meta_offset"]:]))
    return raw, meta, tmp_path / "m.colibri"


@pytest.mark.parametrize("key, value, words", [
    ("hidden_act", "gelu_pytorch_tanh", "'hidden_act' is 'gelu_pytorch_tanh'"),
    ("max_position_embeddings", "128k", "'max_position_embeddings' must be an integer"),
    ("rms_norm_eps", "none", "'rms_norm_eps' must be a finite number, got 'none'"),
])
def test_load_of_old_container_refuses_bad_values(raw_model, key, value, words):
    raw, meta, path = raw_model
    meta["source_config"][key] = value
    path.write_bytes(bytes(set_meta(raw, json.dumps(meta).encode())))
    with pytest.raises(FormatError) as info:
        cd.LLM(path)
    assert words in str(info.value) and str(path) in str(info.value), str(info.value)


@pytest.mark.parametrize("key, field", [("num_hidden_layers", "n_layers=2"), ("hidden_size", "hidden=32")])
def test_metadata_disagreeing_with_the_tables_is_refused(raw_model, key, field):
    raw, meta, path = raw_model
    assert meta["source_config"]["num_hidden_layers"] == 2 and meta["source_config"]["hidden_size"] == 32
    meta["source_config"][key] = 1
    path.write_bytes(bytes(set_meta(raw, json.dumps(meta).encode())))
    with pytest.raises(FormatError) as info:
        cd.open_model(path)
    msg = str(info.value)
    assert str(path) in msg and f"source_config.{key} is 1" in msg and field in msg, msg
    status, msg = c_open(path)
    assert status == 4 and f"source_config.{key} disagrees" in msg and f"({field})" in msg, msg


@pytest.mark.parametrize("value", [2.0, "2", True, [2]])
def test_metadata_layer_count_must_be_the_integer_both_readers(raw_model, value):
    raw, meta, path = raw_model
    meta["source_config"]["num_hidden_layers"] = value
    meta["later"] = {"source_config": {"num_hidden_layers": 1}}        # nested deeper: not the model's
    path.write_bytes(bytes(set_meta(raw, json.dumps(meta).encode())))
    with pytest.raises(FormatError, match="source_config.num_hidden_layers"):
        cd.open_model(path)
    assert c_open(path)[0] == 4


def test_metadata_agreeing_is_accepted_by_both_readers(raw_model):
    raw, meta, path = raw_model
    meta["source_config"]["num_hidden_layers"] = None                  # null = absent, for both
    meta["x"] = {"num_hidden_layers": 9, "s": "\\\"source_config\\\": {"}
    path.write_bytes(bytes(set_meta(raw, json.dumps(meta).encode())))
    cd.open_model(path).close()
    assert c_open(path)[0] == 0, c_open(path)[1]


def test_tensor_named_past_the_last_layer_is_refused_by_both_readers(raw_model):
    raw, _, path = raw_model
    i = find(raw, lambda e: e.name == "model.norm.weight")
    set_entry(raw, i, "name", b"model.layers.5.norm.weight".ljust(128, b"\0"))
    path.write_bytes(bytes(fix_crcs(raw)))
    with pytest.raises(FormatError, match=r"header says 2 layers, but the tensor table holds "
                                          r"'model.layers.5.norm.weight'"):
        cd.open_model(path)
    status, msg = c_open(path)
    assert status == 4 and "header says 2 layers" in msg and "model.layers.5.norm.weight" in msg, msg
