"""Hostile job inputs and output directories (issue 15, defects 7, 8, 9 and the ENOSPC message):
each is one error naming the file (and row), never a traceback, a hang or a mixed output dir."""
import errno
import json
import os
import subprocess
import sys
import threading
from types import SimpleNamespace

import numpy as np
import pytest

import jobs_helpers
from colibri_dist.errors import ColibriError, FormatError
from colibri_dist.jobs.moe_layer import MoeLayer

HIDDEN = 16


@pytest.mark.parametrize("line, message", [
    ('{"id": 1, "input_ids": [1, ' + str(10 ** 30) + ']}', "token id 1000000000000000000000000000000 out of range"),
    ('{"id": 1, "input_ids": ' + "[" * 100000 + "]" * 100000 + '}', "nested too deeply"),
    ('{"id": NaN, "input_ids": [1]}', "'id' must be"),
    ('{"id": 1e999, "input_ids": [1]}', "'id' must be"),
    ('{"id": 1, "input_ids": [1, 2], "labels": [0, ' + str(10 ** 30) + ']}', "'labels' must be"),
], ids=["huge-id", "deep", "nan-id", "inf-id", "huge-label"])
def test_bad_jsonl_row_is_one_error_naming_file_and_line(fake_job, tmp_path, line, message):
    path = os.path.join(fake_job.data, "shard-00001.jsonl")
    with open(path, "a") as fh:
        fh.write(line + "\n")
    with pytest.raises(FormatError, match=message) as info:
        fake_job.run(tmp_path / "out")
    assert f"{path}:6:" in str(info.value)


def test_invalid_utf8_jsonl_names_file_and_line(fake_job, tmp_path):
    path = os.path.join(fake_job.data, "shard-00002.jsonl")
    with open(path, "ab") as fh:
        fh.write(b'{"id": "\xff\xfe", "input_ids": [1]}\n')
    with pytest.raises(FormatError, match="not UTF-8") as info:
        fake_job.run(tmp_path / "out")
    assert f"{path}:6:" in str(info.value)


def _moe_kind():
    model = SimpleNamespace(moe_layers=[0], config=SimpleNamespace(hidden=HIDDEN, n_experts=4))
    cfg = SimpleNamespace(job=SimpleNamespace(layers="all", batch_tokens=8))
    return MoeLayer(cfg, model, "m.colibri")


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_bytes(b""), "not a readable .npy"),
    (lambda p: p.write_bytes(b"\x93NUMPY\x01\x00"), "not a readable .npy"),
    (lambda p: np.save(p, np.zeros((3, HIDDEN), np.float64)), "float32"),
    (lambda p: np.save(p, np.zeros((3, HIDDEN), np.float16)), "float32"),
], ids=["empty", "cut-header", "float64", "float16"])
def test_bad_npy_input_is_one_error_naming_the_file(tmp_path, make, message):
    path = tmp_path / "x.npy"
    make(path)
    with pytest.raises(FormatError, match=message) as info:
        _moe_kind().count_rows(str(path))
    assert str(path) in str(info.value)


def _run_cli(cfg_path, out):
    return subprocess.run([sys.executable, "-m", "colibri_dist", "run", str(cfg_path), "--out", str(out)],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")))


def test_fifo_model_or_input_never_hangs(tmp_path):
    fifo = tmp_path / "m.colibri"
    os.mkfifo(fifo)
    data = tmp_path / "data"
    data.mkdir()
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"job: {{kind: moe-layer, input: {data}}}\nmodel: {fifo}\npool: {{workers: 0}}\n"
                   "report: {progress: none}\n")
    np.save(data / "a.npy", np.zeros((2, HIDDEN), np.float32))
    proc = _run_cli(cfg, tmp_path / "out")
    assert proc.returncode == 1 and "not a regular file" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    from colibri_dist.errors import ConfigError
    from colibri_dist.jobs.run.shards import discover_inputs
    os.mkfifo(tmp_path / "f.npy")
    with pytest.raises(ConfigError, match="f.npy: not a regular file"):
        discover_inputs(str(tmp_path / "f.npy"), (".npy",))


def test_input_discovery_skips_and_reports_non_regular_files(tmp_path):
    from colibri_dist.jobs.run.shards import discover_inputs
    os.mkfifo(tmp_path / "b.jsonl")
    (tmp_path / "a.jsonl").write_text("{}\n")
    os.mkdir(tmp_path / "c.jsonl")
    said = []
    assert discover_inputs(str(tmp_path), (".jsonl",), log=said.append) == [str(tmp_path / "a.jsonl")]
    assert len(said) == 2 and all("not a regular file" in s for s in said)
    assert discover_inputs(str(tmp_path / "*.jsonl"), (".jsonl",), log=said.append) == [str(tmp_path / "a.jsonl")]


def test_second_run_into_a_busy_output_dir_is_refused(fake_job, tmp_path, monkeypatch):
    """Job A holds the output dir for its whole run; B (even with --restart) is refused naming A's pid."""
    started, release = threading.Event(), threading.Event()
    plain = jobs_helpers.FakeExecutor.moe_forward

    def slow(self, layer, x):
        if threading.current_thread().name == "job-a":
            started.set()
            release.wait(30)
        return plain(self, layer, x)
    monkeypatch.setattr(jobs_helpers.FakeExecutor, "moe_forward", slow)
    out = tmp_path / "cx"
    result = {}
    a = threading.Thread(target=lambda: result.setdefault("a", fake_job.run(out)), name="job-a")
    a.start()
    try:
        assert started.wait(30)
        for restart in (False, True):
            with pytest.raises(ColibriError, match=rf"{out}.*in use by another run \(pid {os.getpid()}\)"):
                fake_job.run(out, restart=restart)
    finally:
        release.set()
        a.join(60)
    assert result["a"]["complete"]
    manifest = json.load(open(out / "manifest.json"))
    assert manifest["complete"] and len(manifest["done"]) == 3
    assert fake_job.run(out)["complete"]          # free again once A is done


def test_enospc_on_output_names_the_file(tmp_path, monkeypatch):
    from colibri_dist import fsutil

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(fsutil.os, "fsync", full)
    target = tmp_path / "out.jsonl"
    with pytest.raises(OSError) as info:
        fsutil.atomic_write(str(target), [b"x"])
    assert info.value.filename == str(target) and info.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("where", ["data", "."])
def test_out_dir_holding_the_inputs_is_refused(fake_job, tmp_path, where):
    from colibri_dist.errors import InvalidArgument
    before = {n: open(os.path.join(fake_job.data, n), "rb").read() for n in os.listdir(fake_job.data)}
    out = fake_job.data if where == "data" else str(tmp_path)
    with pytest.raises(InvalidArgument, match="holds the input .*could overwrite it"):
        fake_job.run(out)
    assert {n: open(os.path.join(fake_job.data, n), "rb").read() for n in os.listdir(fake_job.data)} == before
    assert not fake_job.executors                                       # refused before anything started


def test_moe_layer_job_given_jsonl_says_what_it_expects(tmp_path):
    from colibri_dist.errors import ConfigError
    from colibri_dist.jobs.run.shards import discover_inputs
    kind = _moe_kind()
    (tmp_path / "in.jsonl").write_text('{"prompt": "x"}\n')
    with pytest.raises(FormatError, match="in.jsonl: a moe-layer job reads hidden states: .npy .*`job.kind: generate`"):
        kind.count_rows(str(tmp_path / "in.jsonl"))
    with pytest.raises(ConfigError, match=r"no input files ending in \.npy \(a moe-layer job reads hidden states"):
        discover_inputs(str(tmp_path), kind.input_exts, hint=kind.input_hint)
