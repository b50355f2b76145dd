"""Hostile containers with valid checksums (issue 15, defects 2-5 and 7): both readers,
the writer, the converter and `colibri inspect` reject them with one clear error."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.cli import main
from colibri_dist.errors import FormatError
from colibri_dist.format import spec
from colibri_dist.format.writer import ContainerWriter
from container_edit import entries, find, fix_crcs, set_entry, set_meta
from test_format_damage import _edited_checkpoint, c_open


@pytest.fixture
def raw_model(converted, tmp_path):
    path, _ = converted("mixtral", "int8")
    return bytearray(open(path, "rb").read()), tmp_path / "m.colibri"


def _write(path, raw):
    path.write_bytes(bytes(raw))
    return path


def _python_error(path):
    with pytest.raises(FormatError) as info:
        with cd.open_model(path) as m:
            m.verify(progress=False)
    assert str(path) in str(info.value)
    return str(info.value)


def test_shape_product_overflow_rejected_by_both_readers(raw_model):
    raw, path = raw_model
    i = find(raw, lambda e: e.name == "model.embed_tokens.weight")
    e = entries(raw)[i]
    rows, cols = e.shape
    # rows' * cols * 4 == nbytes modulo 2^64: the unchecked C product "matched"
    set_entry(raw, i, "shape0", 2 ** 62 + rows)
    assert ((2 ** 62 + rows) * cols * 4) % 2 ** 64 == e.nbytes
    _write(path, fix_crcs(raw))
    assert "does not match" in _python_error(path)
    status, msg = c_open(path)
    assert status == 4 and "embed_tokens" in msg


def test_writer_rejects_overflowing_shape(tmp_path):
    with ContainerWriter(tmp_path / "w.colibri") as w:
        with pytest.raises(FormatError, match="expected"):
            w.add_tensor("t", np.zeros(16, np.float32), 0, (2 ** 62 + 4, 4))


def test_duplicate_names_rejected_by_both_readers(raw_model):
    raw, path = raw_model
    i = find(raw, lambda e: e.name == "lm_head.weight")
    set_entry(raw, i, "name", b"model.norm.weight")
    _write(path, fix_crcs(raw))
    assert "duplicate tensor name 'model.norm.weight'" in _python_error(path)
    status, msg = c_open(path)
    assert status == 4 and "duplicate" in msg and "model.norm.weight" in msg


def test_duplicate_expert_slot_rejected_by_both_readers(raw_model):
    raw, path = raw_model
    i = find(raw, lambda e: e.kind == spec.KIND_EXPERT and e.layer == 0 and e.expert == 1)
    set_entry(raw, i, "expert", 0)
    _write(path, fix_crcs(raw))
    assert "appears twice" in _python_error(path)
    status, msg = c_open(path)
    assert status == 4 and "layer 0 expert 0" in msg


def test_writer_rejects_duplicate_expert_slot(tmp_path):
    from colibri_dist.format.quantize import pack_expert
    blob, layout = pack_expert(np.ones((4, 8), np.float32), np.ones((4, 8), np.float32),
                               np.ones((8, 4), np.float32), "f32")
    with ContainerWriter(tmp_path / "w.colibri") as w:
        w.add_blob("a", blob, layout, spec.KIND_EXPERT, 0, 0)
        with pytest.raises(FormatError, match="layer 0 expert 0 written twice"):
            w.add_blob("b", blob, layout, spec.KIND_EXPERT, 0, 0)


@pytest.mark.parametrize("meta,words", [(b'{"a": "\xff\xfe"}', "not UTF-8"), (b"{not json", "not valid JSON"),
                                        (b"[" * 100000, "nested too deeply"), (b"[1, 2]", "JSON object")],
                         ids=["utf8", "json", "deep", "list"])
def test_bad_metadata_is_one_format_error(raw_model, capsys, meta, words):
    raw, path = raw_model
    _write(path, set_meta(raw, meta))
    with pytest.raises(FormatError, match=words):
        cd.MoeExecutor(path)
    assert main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("colibri: error:") and words in err[0]


def test_inspect_directory_is_one_error(tmp_path, capsys):
    assert main(["inspect", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a directory" in err[0] and str(tmp_path) in err[0]


def test_inspect_fifo_does_not_hang(tmp_path):
    fifo = tmp_path / "f.colibri"
    os.mkfifo(fifo)
    for cmd in (["inspect", str(fifo)], ["verify", str(fifo), "--no-progress"]):
        proc = subprocess.run([sys.executable, "-m", "colibri_dist", *cmd], capture_output=True, text=True,
                              timeout=60, env=dict(os.environ, PYTHONPATH=os.getcwd()))
        assert proc.returncode == 1 and "not a regular file" in proc.stderr, proc.stderr
    status, msg = c_open(fifo)
    assert status != 0 and "regular file" in msg


def test_converter_rejects_nan_router_and_dense_tensor(tiny_dir, tmp_path):
    name = "model.layers.1.block_sparse_moe.gate.weight"

    def nan_router(t):
        dtype, shape, raw = t[name]
        arr = np.frombuffer(raw, np.float32).copy()
        arr[3] = np.nan
        t[name] = (dtype, shape, arr.tobytes())
    src = _edited_checkpoint(tiny_dir, tmp_path / "a", nan_router)
    with pytest.raises(FormatError, match=f"{name}.*non-finite"):
        cd.convert(src, tmp_path / "o.colibri", experts="f32", progress=False)
    assert not (tmp_path / "o.colibri").exists()

    def inf_norm(t):
        dtype, shape, raw = t["model.norm.weight"]
        arr = np.frombuffer(raw, np.float32).copy()
        arr[0] = np.inf
        t["model.norm.weight"] = (dtype, shape, arr.tobytes())
    src = _edited_checkpoint(tiny_dir, tmp_path / "b", inf_norm)
    with pytest.raises(FormatError, match="model.norm.weight.*non-finite"):
        cd.convert(src, tmp_path / "o.colibri", experts="f32", progress=False)


def test_nan_dense_tensor_with_fixed_crcs_rejected_on_use(raw_model):
    import struct
    from container_edit import fix_entry_crc
    raw, path = raw_model
    i = find(raw, lambda e: e.name == "model.norm.weight")
    struct.pack_into("<f", raw, entries(raw)[i].offset, float("nan"))
    fix_entry_crc(raw, i)
    _write(path, fix_crcs(raw))
    with cd.open_model(path) as m:
        with pytest.raises(FormatError, match="model.norm.weight is invalid: 1 non-finite"):
            m.tensor("model.norm.weight")
    assert "model.norm.weight" in _python_error(path)
    shutil.copy(path, path.with_suffix(".copy"))


def test_c_reader_verify_rejects_nan_scale(raw_model):
    import struct
    from container_edit import fix_entry_crc
    raw, path = raw_model
    i = find(raw, lambda e: e.kind == spec.KIND_EXPERT and e.layer == 1 and e.expert == 2)
    e = entries(raw)[i]
    struct.pack_into("<f", raw, e.offset + e.matrices[2].scale_offset, float("nan"))
    fix_entry_crc(raw, i)
    _write(path, fix_crcs(raw))
    status, msg = c_open(path, verify=1)
    assert status == 4 and "layer 1 expert 2 is invalid" in msg
    assert c_open(path, verify=0)[0] == 0
    assert "layer 1 expert 2" in _python_error(path)
