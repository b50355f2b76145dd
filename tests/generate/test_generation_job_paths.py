"""The generate/score job paths a new user trips on (issue 21 items 4, 13, 17, 18, 19), on the fake LLM."""
import io
import json
import os

import pytest

from colibri_dist.config import load_config
from colibri_dist.errors import InvalidArgument
from colibri_dist.generate.outputs import StreamEvent
from colibri_dist.jobs.run.progress import RequestProgress
from colibri_dist.jobs.pipeline import run_job

from gen_fake_llm import FakeLLM


def _write(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


def _cfg(tmp_path, job="", report="{progress: none, html: false}"):
    p = tmp_path / "job.yaml"
    p.write_text(f"job:\n  kind: generate\n  input: data\n  sampling_params: {{max_tokens: 4}}\n{job}"
                 f"model: m.colibri\npool: {{workers: 0}}\nreport: {report}\n")
    return load_config(str(p))


def _rows(out):
    return [json.loads(line) for n in sorted(os.listdir(out)) if n.endswith(".jsonl")
            for line in open(os.path.join(out, n))]


ROWS = [{"id": f"r{i}", "prompt": "one two three " * (i % 3 + 1)} for i in range(6)]


# ---------------------------------------------------------------- item 4: --out over the inputs


@pytest.mark.parametrize("out", ["data", ".", "m"])
def test_out_dir_holding_an_input_or_the_model_is_refused(tmp_path, out):
    _write(str(tmp_path / "data" / "in.jsonl"), ROWS)
    before = (tmp_path / "data" / "in.jsonl").read_bytes()
    cfg = _cfg(tmp_path)
    cfg.model = str(tmp_path / "m" / "m.colibri")
    os.makedirs(tmp_path / "m")
    (tmp_path / "m" / "m.colibri").write_bytes(b"fake")
    what = "model" if out == "m" else "input"
    with pytest.raises(InvalidArgument, match=f"holds the {what} .*could overwrite it"):
        run_job(cfg, out_dir=str(tmp_path / out), llm_factory=lambda c: pytest.fail("ran"))
    assert (tmp_path / "data" / "in.jsonl").read_bytes() == before
    assert sorted(os.listdir(tmp_path / "data")) == ["in.jsonl"]


# ---------------------------------------------------------------- item 13: row errors by id, not by batch index


def test_row_error_text_is_the_same_whatever_the_batching_or_resume(tmp_path):
    rows = ROWS[:3] + [{"id": "bad", "prompt_token_ids": [1, 9999]}, {"id": "e", "prompt": ""}] + ROWS[3:]
    _write(str(tmp_path / "data" / "in.jsonl"), rows)
    run_job(_cfg(tmp_path), out_dir=str(tmp_path / "one"), llm_factory=lambda c: FakeLLM())
    cfg = _cfg(tmp_path, job="  shard_rows: 2\n  max_num_seqs: 1\n")
    with pytest.raises(RuntimeError, match="killed"):               # resume from the middle
        run_job(cfg, out_dir=str(tmp_path / "cut"), llm_factory=lambda c: FakeLLM(fail_on_call=2))
    run_job(cfg, out_dir=str(tmp_path / "cut"), llm_factory=lambda c: FakeLLM())
    one, cut = _rows(tmp_path / "one"), _rows(tmp_path / "cut")
    assert one == cut
    errors = [r for r in one if "error" in r]
    assert [r["id"] for r in errors] == ["bad", "e"]
    assert all(not r["error"].startswith("request ") for r in errors), errors
    with open(tmp_path / "cut" / "report.json") as fh:
        examples = json.load(fh)["error_examples"]
    assert [e["where"].rsplit("/", 1)[-1] for e in examples] == ["in.jsonl:4", "in.jsonl:5"]


# ---------------------------------------------------------------- item 17: null means absent


def test_a_null_prompt_field_counts_as_absent_in_jsonl_and_parquet(tmp_path):
    rows = [{"id": "a", "prompt": "one two", "messages": None},
            {"id": "b", "prompt": None, "messages": [{"role": "user", "content": "one"}]},
            {"id": "c", "prompt_token_ids": [4, 5], "prompt": None, "messages": None},
            {"id": "d", "prompt": None, "messages": None}]
    _write(str(tmp_path / "data" / "in.jsonl"), rows)
    rep = run_job(_cfg(tmp_path), out_dir=str(tmp_path / "out"), llm_factory=lambda c: FakeLLM())
    out = _rows(tmp_path / "out")
    assert ["error" in r for r in out] == [False, False, False, True] and rep["errors"] == 1
    assert "no prompt field" in out[3]["error"]
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    os.makedirs(tmp_path / "pq" / "data")
    pq.write_table(pa.Table.from_pylist([{"id": "p", "prompt": "one two", "prompt_token_ids": None},
                                         {"id": "q", "prompt": None, "prompt_token_ids": [4, 5]}]),
                   str(tmp_path / "pq" / "data" / "x.parquet"))
    run_job(_cfg(tmp_path / "pq"), out_dir=str(tmp_path / "pq" / "out"), llm_factory=lambda c: FakeLLM())
    assert [("error" in r) for r in _rows(tmp_path / "pq" / "out")] == [False, False]


# ---------------------------------------------------------------- item 18: a finished job


def test_a_finished_job_says_so_opens_nothing_and_keeps_its_report(tmp_path):
    _write(str(tmp_path / "data" / "in.jsonl"), ROWS)
    cfg = _cfg(tmp_path, job="  shard_rows: 2\n  max_num_seqs: 1\n", report="{progress: log, html: true}")
    with pytest.raises(RuntimeError, match="killed"):
        run_job(cfg, out_dir=str(tmp_path / "out"), llm_factory=lambda c: FakeLLM(fail_on_call=2))
    first = run_job(cfg, out_dir=str(tmp_path / "out"), llm_factory=lambda c: FakeLLM())
    assert first["complete"] and [r["shards_written"] for r in first["runs"]] == [2, 1]   # both runs kept
    files = {n: (tmp_path / "out" / n).read_bytes() for n in ("report.json", "report.html")}
    stream = io.StringIO()
    again = run_job(cfg, out_dir=str(tmp_path / "out"), stream=stream,
                    llm_factory=lambda c: pytest.fail("opened the model for a finished job"))
    assert again == first
    assert "nothing to do: all 3 shard(s)" in stream.getvalue() and "report kept" in stream.getvalue()
    assert {n: (tmp_path / "out" / n).read_bytes() for n in files} == files


def test_runs_merge_over_every_resume(tmp_path):
    _write(str(tmp_path / "data" / "in.jsonl"), ROWS)
    cfg = _cfg(tmp_path, job="  shard_rows: 2\n  max_num_seqs: 1\n")
    with pytest.raises(RuntimeError, match="killed"):
        run_job(cfg, out_dir=str(tmp_path / "out"), llm_factory=lambda c: FakeLLM(fail_on_call=2))
    with pytest.raises(RuntimeError, match="killed"):
        run_job(cfg, out_dir=str(tmp_path / "out"), llm_factory=lambda c: FakeLLM(fail_on_call=1))
    rep = run_job(cfg, out_dir=str(tmp_path / "out"), llm_factory=lambda c: FakeLLM())
    # a failed run reports what it wrote (complete: false); the last report holds every run
    assert rep["rows"] == 6 and [r["shards_written"] for r in rep["runs"]] == [2, 0, 1]
    restarted = run_job(cfg, out_dir=str(tmp_path / "out"), restart=True, llm_factory=lambda c: FakeLLM())
    assert len(restarted["runs"]) == 1


# ---------------------------------------------------------------- item 19: progress


def test_progress_none_keeps_the_summary_and_the_report_paths(tmp_path):
    _write(str(tmp_path / "data" / "in.jsonl"), ROWS)
    stream = io.StringIO()
    run_job(_cfg(tmp_path, report="{progress: none}"), out_dir=str(tmp_path / "out"), stream=stream,
            llm_factory=lambda c: FakeLLM())
    text = stream.getvalue()
    assert "colibri run: generate summary" in text and str(tmp_path / "out" / "report.json") in text
    assert " requests, " not in text                                    # no progress lines


def _event(index, finish=None):
    return StreamEvent(index=index, token_id=3, text="x", finish_reason=finish)


def test_progress_moves_per_request_and_token_before_a_shard_is_written():
    stream = io.StringIO()
    p = RequestProgress(4, mode="log", log_every_s=1e-9, stream=stream)
    p.on_token(_event(0))
    p.on_token(_event(0, "length"))
    lines = stream.getvalue().splitlines()
    assert lines and "1/4 requests, 2 tokens generated" in lines[-1]      # before any rows_done
    p.rows_done(2, finished=1)                                            # that shard: 1 ok, 1 error row
    assert "2/4 requests" in stream.getvalue().splitlines()[-1]


def test_progress_bar_counts_finished_requests_as_they_end():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    p = RequestProgress(3, mode="bar", stream=Tty())
    p.BAR_EVERY_S = 0.0
    p.on_token(_event(0, "eos"))
    p.on_token(_event(1))
    assert p.bar.n == 1
    p.rows_done(3, finished=1)
    assert p.bar.n == 3
    p.close()


def test_a_model_that_fails_to_open_leaves_no_output_dir(tmp_path):
    from colibri_dist.errors import FormatError
    _write(str(tmp_path / "data" / "in.jsonl"), ROWS)

    def damaged(cfg):
        raise FormatError("m.colibri: tensor table is damaged")
    with pytest.raises(FormatError):
        run_job(_cfg(tmp_path), out_dir=str(tmp_path / "out"), llm_factory=damaged)
    assert not os.path.exists(tmp_path / "out")      # planned (manifest) before the open, removed with it
