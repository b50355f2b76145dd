"""Runner: outputs per shard, resume after a crash (no row lost or duplicated), manifest guards."""
import json
import os

import numpy as np
import pytest

from colibri_dist.errors import FormatError, InvalidArgument
from jobs_helpers import output_rows, read_jsonl


def test_runner_writes_one_output_line_per_input_row(fake_job, tmp_path):
    out = tmp_path / "out"
    rep = fake_job.run(out)
    rows = output_rows(out)
    inputs = [r for f in sorted(os.listdir(fake_job.data)) for r in read_jsonl(os.path.join(fake_job.data, f))]
    assert [r["id"] for r in rows] == [r["id"] for r in inputs]
    for got, src in zip(rows, inputs):
        probs = np.asarray(got["probs"])
        assert probs.shape == (len(src["input_ids"]), 5)
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
        assert got["pred"] == probs.argmax(axis=1).tolist()
    assert rep["complete"] and rep["rows"] == len(inputs)
    assert rep["tokens"] == sum(len(r["input_ids"]) for r in inputs)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and sorted(manifest["done"]) == manifest["shards"]
    assert fake_job.executors[-1].closed


def test_runner_output_independent_of_batch_size(fake_job, tmp_path):
    fake_job.run(tmp_path / "a")
    fake_job.run(tmp_path / "b", job__batch_tokens=5)
    a, b = output_rows(tmp_path / "a"), output_rows(tmp_path / "b")
    assert a == b   # exact: same floats whatever the batch boundaries (dense math is per-row)


def test_resume_after_crash_gives_every_row_once_and_same_outputs(fake_job, tmp_path):
    ref = tmp_path / "ref"
    fake_job.run(ref)
    out = tmp_path / "out"
    # 2 layers x 4 batches (30 tokens / 8) per shard: die inside the second shard
    with pytest.raises(KeyboardInterrupt):
        fake_job.run(out, fail_after=10)
    written = sorted(n for n in os.listdir(out) if n.endswith(".jsonl"))
    assert written == ["shard-00000.jsonl"]
    assert not [n for n in os.listdir(out) if ".tmp-" in n]
    rep = fake_job.run(out)
    assert rep["shards"] == {"total": 3, "written_this_run": 2, "resumed": 1}
    assert fake_job.executors[-1].calls == 2 * 8          # only two shards recomputed
    got, want = output_rows(out), output_rows(ref)
    assert [r["id"] for r in got] == [r["id"] for r in want]
    assert len({r["id"] for r in got}) == len(got)
    assert got == want
    assert rep["tokens"] == sum(len(r["pred"]) for r in want)


def test_resume_of_a_complete_run_recomputes_nothing(fake_job, tmp_path):
    first = fake_job.run(tmp_path / "out")
    rep = fake_job.run(tmp_path / "out")
    assert len(fake_job.executors) == 1          # no executor (no Ray) started for nothing
    assert rep == json.loads(json.dumps(first)) and rep["complete"]
    (tmp_path / "out" / "report.json").unlink()  # a crash after the last shard, before the report
    rep = fake_job.run(tmp_path / "out")
    assert fake_job.executors[-1].calls == 0 and rep["shards"] == {"total": 3, "written_this_run": 0, "resumed": 3}
    assert rep["tokens"] == first["tokens"] and (tmp_path / "out" / "report.json").exists()


def test_shard_with_missing_or_truncated_output_is_recomputed(fake_job, tmp_path):
    out = tmp_path / "out"
    fake_job.run(out)
    want = output_rows(out)
    with open(out / "shard-00001.jsonl", "r+b") as fh:
        fh.truncate(10)
    (out / "shard-00002.jsonl").unlink()
    rep = fake_job.run(out)
    assert rep["shards"]["written_this_run"] == 2
    assert output_rows(out) == want


def test_different_job_in_same_out_dir_is_refused_unless_restart(fake_job, tmp_path):
    out = tmp_path / "out"
    fake_job.run(out)
    with open(os.path.join(fake_job.data, "shard-00000.jsonl"), "a") as fh:
        fh.write(json.dumps({"id": "extra", "input_ids": [1, 2]}) + "\n")
    with pytest.raises(InvalidArgument, match="different job"):
        fake_job.run(out)
    rep = fake_job.run(out, restart=True)
    assert rep["shards"]["written_this_run"] == 3 and rep["rows"] == 16


def test_shard_rows_splits_inputs_into_resumable_parts(fake_job, tmp_path):
    out = tmp_path / "out"
    rep = fake_job.run(out, job__shard_rows=2)
    names = sorted(n for n in os.listdir(out) if n.endswith(".jsonl"))
    assert names[:3] == ["shard-00000.part00000.jsonl", "shard-00000.part00001.jsonl", "shard-00000.part00002.jsonl"]
    assert len(names) == 9 and rep["rows"] == 15
    whole = fake_job.run(tmp_path / "whole")
    assert output_rows(out) == output_rows(tmp_path / "whole") and whole["rows"] == 15


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    ('{"id": 1, "input_ids": [1, 99999]}', "token id 99999 out of range"),
    ('{"id": 1, "tokens": [1]}', "row has no 'input_ids' or 'text' field"),
    ('{"id": 1, "input_ids": [1, 2], "labels": [0]}', "'labels' must be a list as long"),
])
def test_bad_input_row_names_file_and_line(fake_job, tmp_path, line, message):
    path = os.path.join(fake_job.data, "shard-00001.jsonl")
    with open(path, "a") as fh:
        fh.write(line + "\n")
    with pytest.raises(FormatError, match=message) as info:
        fake_job.run(tmp_path / "out")
    assert f"{path}:6:" in str(info.value)
    assert not os.path.exists(tmp_path / "out" / "shard-00001.jsonl")


def test_text_input_is_tokenized_with_the_models_tokenizer(fake_job, tmp_path):
    pytest.importorskip("tokenizers")
    from colibri_dist.demos.classifier import demo_words, write_tokenizer
    tok = tmp_path / "tokenizer.json"
    write_tokenizer(str(tok), demo_words(64))
    rows = [json.loads(line) for line in open(os.path.join(fake_job.data, "shard-00000.jsonl"))]
    text_dir = tmp_path / "text"
    text_dir.mkdir()
    (text_dir / "t.jsonl").write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in rows))
    fake_job.run(tmp_path / "ids")
    fake_job.run(tmp_path / "txt", job__input=str(text_dir), job__tokenizer=str(tok))
    want = read_jsonl(tmp_path / "ids" / "shard-00000.jsonl")
    assert read_jsonl(tmp_path / "txt" / "t.jsonl") == want


def test_text_input_without_tokenizer_is_a_clear_error(fake_job, tmp_path):
    from colibri_dist.errors import ConfigError
    text_dir = tmp_path / "text"
    text_dir.mkdir()
    (text_dir / "t.jsonl").write_text(json.dumps({"id": 0, "text": "ba be"}) + "\n")
    with pytest.raises(ConfigError, match="tokenizer.json"):
        fake_job.run(tmp_path / "out", job__input=str(text_dir))


def _legacy_signature(cfg, model_path, paths, kind_settings):
    """The signature token-classification and moe-layer dirs were written under before the one runner
    (jobs/pipeline.py job_signature of that colibri, verbatim): model path + mtime, no routing.policy."""
    import hashlib
    from colibri_dist.store import segments_dir
    st = os.stat(model_path)
    files = [[os.path.abspath(p), os.path.getsize(p), os.stat(p).st_mtime_ns] for p in paths]
    manifest = os.path.join(segments_dir(model_path), "MANIFEST.json")
    table = hashlib.sha256(open(manifest, "rb").read()).hexdigest()[:16] if os.path.isfile(manifest) else None
    return {"kind": cfg.job.kind, "model": os.path.abspath(model_path), "model_bytes": st.st_size,
            "model_mtime_ns": st.st_mtime_ns, "expert_table": table,
            "inputs": files, "shard_rows": cfg.job.shard_rows, "job.w8a8": bool(cfg.job.w8a8),
            "kind_settings": kind_settings,
            "inputs_digest": hashlib.sha256(repr(files).encode()).hexdigest()[:16]}


def test_a_dir_written_under_the_old_signature_format_is_refused_naming_why(fake_job, tmp_path):
    """An output dir of the earlier token-classification runner (its signature held the model's path and
    mtime, not its content nor routing.policy) cannot be checked against this job: refused, not mixed."""
    from colibri_dist.config import load_config
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        fake_job.run(out, fail_after=10)                     # one shard written
    cfg = load_config(fake_job.cfg_path)
    paths = sorted(os.path.join(fake_job.data, n) for n in os.listdir(fake_job.data))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["signature"] = _legacy_signature(cfg, cfg.model, paths, {
        "input_format": "auto", "ids_field": "input_ids", "text_field": "text", "id_field": "id", "tokenizer": None})
    (out / "manifest.json").write_text(json.dumps(manifest))
    calls = len(fake_job.executors)
    with pytest.raises(InvalidArgument) as exc:
        fake_job.run(out)
    msg = str(exc.value)
    assert "a token-classification job written under another resume signature format" in msg
    assert "older colibri" in msg and "--restart" in msg and "new --out" in msg
    assert len(fake_job.executors) == calls                  # refused before an executor started
    assert sorted(n for n in os.listdir(out) if n.endswith(".jsonl")) == ["shard-00000.jsonl"]   # kept as it was
    rep = fake_job.run(out, restart=True)
    assert rep["complete"] and rep["shards"]["written_this_run"] == 3
