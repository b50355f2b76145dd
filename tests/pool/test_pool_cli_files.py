"""`colibri experts add` file handling without Ray: tensor names, router rows, named errors, exit codes."""
import numpy as np
import pytest
from safetensors.numpy import save_file

from colibri_dist.cli import main
from colibri_dist.cli.experts import load_expert
from colibri_dist.errors import InvalidArgument


def _weights(tmp_path, names=("gate", "up", "down"), extra=None):
    rng = np.random.default_rng(0)
    shapes = [(4, 6), (4, 6), (6, 4)]
    tensors = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    tensors.update(extra or {})
    path = tmp_path / "w.safetensors"
    save_file(tensors, str(path))
    return str(path), tensors


def test_hf_style_names_and_router_row_inside_the_weights_file(tmp_path):
    names = ("mlp.experts.9.gate_proj.weight", "mlp.experts.9.up_proj.weight", "mlp.experts.9.down_proj.weight")
    path, t = _weights(tmp_path, names, {"router_row": np.arange(6, dtype=np.float32)})
    weights, row = load_expert(path)
    assert np.array_equal(weights["gate"], t[names[0]]) and np.array_equal(weights["down"], t[names[2]])
    assert row.tolist() == list(range(6))


def test_router_row_from_npy_or_single_tensor_safetensors(tmp_path):
    path, _ = _weights(tmp_path, ("w1", "w3", "w2"))
    np.save(str(tmp_path / "row.npy"), np.ones((1, 6), np.float32))
    assert load_expert(path, str(tmp_path / "row.npy"))[1].shape == (6,)
    save_file({"r": np.zeros(6, np.float32)}, str(tmp_path / "row.safetensors"))
    assert load_expert(path, str(tmp_path / "row.safetensors"))[1].tolist() == [0.0] * 6
    save_file({"a": np.zeros(6, np.float32), "b": np.zeros(6, np.float32)}, str(tmp_path / "two.safetensors"))
    with pytest.raises(InvalidArgument, match="two.safetensors: expected exactly one tensor"):
        load_expert(path, str(tmp_path / "two.safetensors"))


def test_missing_tensor_or_row_or_file_is_a_named_usage_error(tmp_path, capsys):
    path, _ = _weights(tmp_path, ("gate", "up", "other"))
    with pytest.raises(InvalidArgument, match=r"w.safetensors: no down tensor .*found gate, other, up"):
        load_expert(path, None)
    ok, _ = _weights(tmp_path)
    with pytest.raises(InvalidArgument, match="no router_row tensor and no --router-row"):
        load_expert(ok, None)
    with pytest.raises(InvalidArgument, match="missing.safetensors: no such file"):
        load_expert(str(tmp_path / "missing.safetensors"))
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(InvalidArgument, match="junk.safetensors: not a readable safetensors file"):
        load_expert(str(tmp_path / "junk.safetensors"))
    # the CLI maps it to exit code 2 before touching Ray
    code = main(["experts", "add", "--pool", "nope", "--layer", "0", "--weights", path])
    assert code == 2 and "w.safetensors: no router_row tensor" in capsys.readouterr().err
