"""The `generate` and `score` job kinds on a fake LLM: output columns, bad rows, on_error, resume."""
import json
import os

import pytest

from colibri_dist.config import load_config
from colibri_dist.errors import ConfigError, InvalidArgument
from colibri_dist.generate import SamplingParams
from colibri_dist.generate.sampler import derive_seed
from colibri_dist.jobs.pipeline import run_generation_job

from gen_fake_llm import FakeLLM

GOOD = [
    {"id": "a", "prompt": "one two three"},
    {"id": "b", "prompt": "the quick brown fox", "sampling_params": {"temperature": 1.0, "max_tokens": 5}},
    {"id": "c", "messages": [{"role": "user", "content": "copy: abc abc"}]},
    {"prompt_token_ids": [5, 6, 7, 8], "sampling_params": {"logprobs": 2, "seed": 7, "temperature": 0.5}},
    {"id": 9, "prompt": "count: 1 2 3", "sampling_params": {"stop": ["4"], "ignore_eos": True}},
]


def _write(path, rows, raw_lines=()):
    with open(path, "wb") as fh:
        for r in rows:
            fh.write((json.dumps(r) + "\n").encode())
        for line in raw_lines:
            fh.write(line + b"\n")


def _cfg(tmp_path, kind="generate", extra=""):
    p = tmp_path / "job.yaml"
    p.write_text(f"job:\n  kind: {kind}\n  input: data\n  sampling_params: {{max_tokens: 8, temperature: 0.0}}\n"
                 f"  seed: 3\n{extra}report: {{progress: none}}\n")
    return load_config(str(p))


def _rows(out):
    rows = []
    for name in sorted(os.listdir(out)):
        if name.endswith(".jsonl"):
            with open(os.path.join(out, name)) as fh:
                rows += [json.loads(line) for line in fh]
    return rows


def test_generate_rows_equal_direct_generation(tmp_path):
    os.makedirs(tmp_path / "data")
    _write(tmp_path / "data" / "in.jsonl", GOOD)
    llm = FakeLLM()
    rep = run_generation_job(_cfg(tmp_path), llm, out_dir=str(tmp_path / "out"))
    rows = _rows(tmp_path / "out")
    assert [r["id"] for r in rows] == ["a", "b", "c", 3, 9] and rep["rows"] == 5 and rep["errors"] == 0
    tok = llm.tokenizer
    prompts = [tok.encode("one two three").ids, tok.encode("the quick brown fox").ids,
               tok.encode("user: copy: abc abc\nassistant:", add_special_tokens=False).ids,
               [5, 6, 7, 8], tok.encode("count: 1 2 3").ids]
    base = {"max_tokens": 8, "temperature": 0.0}
    params = [SamplingParams(**base, seed=derive_seed(3, "a")),
              SamplingParams(max_tokens=5, temperature=1.0, seed=derive_seed(3, "b")),
              SamplingParams(**base, seed=derive_seed(3, "c")),
              SamplingParams(max_tokens=8, temperature=0.5, seed=7, logprobs=2),
              SamplingParams(**base, stop=["4"], ignore_eos=True, seed=derive_seed(3, 9))]
    want = FakeLLM().generate(prompts, params)
    for r, c in zip(rows, want):
        assert r["generated_text"] == c.text and r["generated_tokens"] == c.token_ids
        assert r["num_input_tokens"] == len(c.prompt_token_ids) and r["num_generated_tokens"] == len(c.token_ids)
        assert r["finish_reason"] == c.finish_reason
    assert "logprobs" in rows[3] and "logprobs" not in rows[0]
    assert rows[3]["logprobs"] == [lp.to_dict() for lp in want[3].logprobs]
    assert sum(rep["finish_reasons"].values()) == 5 and rep["generated_tokens"] == sum(len(c.token_ids) for c in want)


BAD = [
    ({"id": "e1", "prompt": ""}, "empty prompt"),
    ({"id": "e2", "prompt_token_ids": list(range(30))}, "longer than max_seq_len 24"),
    ({"id": "e3", "prompt_token_ids": [1, 9999]}, "token id 9999 outside the vocabulary"),
    ({"id": "e4", "prompt": "one", "sampling_params": {"temprature": 1}}, "unknown sampling parameter 'temprature'"),
    ({"id": "e5"}, "no prompt field"),
    ({"id": "e6", "prompt": "one", "prompt_token_ids": [3]}, "more than one prompt field"),
    ({"id": "e7", "prompt": 5}, "'prompt' must be a string"),
    ({"id": "e8", "prompt_token_ids": [1, "x"]}, "list of integer token ids"),
    ({"id": "e9", "prompt": "one", "sampling_params": {"top_p": 0}}, "SamplingParams.top_p"),
]


def test_bad_rows_get_errors_and_the_job_goes_on(tmp_path):
    os.makedirs(tmp_path / "data")
    _write(tmp_path / "data" / "in.jsonl", GOOD[:2] + [r for r, _ in BAD],
           raw_lines=[b'{"id": "u", "prompt": "caf\xe9"}', b'{"id": "j", '])
    rep = run_generation_job(_cfg(tmp_path), FakeLLM(), out_dir=str(tmp_path / "out"))
    rows = _rows(tmp_path / "out")
    assert rep["rows"] == len(rows) == 2 + len(BAD) + 2 and rep["errors"] == len(BAD) + 2
    assert "error" not in rows[0] and "error" not in rows[1] and rows[0]["generated_tokens"]
    for row, (src, msg) in zip(rows[2:], BAD):
        assert row["id"] == src["id"] and msg in row["error"] and set(row) == {"id", "error"}
    assert "invalid UTF-8" in rows[-2]["error"] and "not valid JSON" in rows[-1]["error"]
    assert rows[-1]["id"] == len(rows) - 1                       # no id readable: the row's index


def test_on_error_fail_names_the_row(tmp_path):
    os.makedirs(tmp_path / "data")
    _write(tmp_path / "data" / "in.jsonl", GOOD[:2] + [BAD[0][0]])
    with pytest.raises(InvalidArgument, match=r"in\.jsonl:3: row 'e1': .*empty prompt.*on_error: fail"):
        run_generation_job(_cfg(tmp_path, extra="  on_error: fail\n"), FakeLLM(), out_dir=str(tmp_path / "out"))
    _write(tmp_path / "data" / "in.jsonl", GOOD[:2] + [BAD[4][0]])
    with pytest.raises(InvalidArgument, match=r"in\.jsonl:3: row 'e5': row has no prompt field"):
        run_generation_job(_cfg(tmp_path, extra="  on_error: fail\n"), FakeLLM(), out_dir=str(tmp_path / "o2"))


def test_killed_run_resumes_to_the_same_bytes(tmp_path):
    os.makedirs(tmp_path / "data")
    rows = [{"id": f"r{i}", "prompt": "one two three " * (i % 3 + 1),
             "sampling_params": {"temperature": 0.8 * (i % 2)}} for i in range(11)]
    _write(tmp_path / "data" / "a.jsonl", rows[:6])
    _write(tmp_path / "data" / "b.jsonl", rows[6:])
    cfg = _cfg(tmp_path, extra="  shard_rows: 2\n  max_num_seqs: 1\n")   # llm calls of >= 4 rows: 2 shards
    ref = FakeLLM()
    run_generation_job(cfg, ref, out_dir=str(tmp_path / "ref"))
    assert ref.calls == 3
    with pytest.raises(RuntimeError, match="killed"):
        run_generation_job(cfg, FakeLLM(fail_on_call=3), out_dir=str(tmp_path / "cut"))
    assert len([n for n in os.listdir(tmp_path / "cut") if n.endswith(".jsonl")]) == 4
    again = FakeLLM()
    rep = run_generation_job(cfg, again, out_dir=str(tmp_path / "cut"))
    assert again.calls == 1 and rep["shards"] == {"total": 6, "written_this_run": 2} and rep["rows"] == 11
    one_call = tmp_path / "one"                    # default grouping: the whole job in one call, same bytes
    run_generation_job(_cfg(tmp_path, extra="  shard_rows: 2\n"), FakeLLM(), out_dir=str(one_call))
    names = sorted(n for n in os.listdir(tmp_path / "ref") if n.endswith(".jsonl"))
    assert names == sorted(n for n in os.listdir(tmp_path / "cut") if n.endswith(".jsonl")) and len(names) == 6
    for n in names:
        assert (tmp_path / "ref" / n).read_bytes() == (tmp_path / "cut" / n).read_bytes()
        assert (tmp_path / "ref" / n).read_bytes() == (one_call / n).read_bytes()
    assert [r["id"] for r in _rows(tmp_path / "cut")] == [r["id"] for r in rows]


def test_score_job(tmp_path):
    os.makedirs(tmp_path / "data")
    _write(tmp_path / "data" / "in.jsonl", [{"id": 1, "prompt": "one two three"}, {"prompt_token_ids": [4, 5]},
                                            {"id": 3, "messages": [{"role": "user", "content": "x"}]}])
    rep = run_generation_job(_cfg(tmp_path, kind="score"), FakeLLM(), out_dir=str(tmp_path / "out"))
    rows = _rows(tmp_path / "out")
    want = FakeLLM().score([FakeLLM().tokenizer.encode("one two three").ids, [4, 5]])
    assert rows[0] == {"id": 1, "prompt_logprobs": want[0].token_logprobs, "total_logprob": want[0].total_logprob,
                       "num_tokens": want[0].num_tokens}
    assert rows[1]["num_tokens"] == 2 and len(rows[1]["prompt_logprobs"]) == 1
    assert "not 'messages'" in rows[2]["error"] and rep["errors"] == 1


@pytest.mark.parametrize("text, where, msg", [
    ("  sampling_params: {temperature: -1}\n", ":4:21:", "job.sampling_params.temperature: SamplingParams.temperature"),
    ("  sampling_params:\n    max_tokens: 3\n    beam: 2\n", ":6:5:", "unknown sampling parameter 'beam'"),
    ("  sampling_params: [1]\n", ":4:20:", "job.sampling_params: expected a mapping"),
    ("  on_error: skip\n", ":4:13:", "job.on_error: expected one of continue | fail"),
    ("  seed: -2\n", ":4:9:", "job.seed: expected an integer >= 0"),
])
def test_config_errors_name_file_line_column(tmp_path, text, where, msg):
    p = tmp_path / "job.yaml"
    p.write_text(f"job:\n  kind: generate\n  input: data\n{text}")
    with pytest.raises(ConfigError) as exc:
        cfg = load_config(str(p))
        run_generation_job(cfg, FakeLLM(), out_dir=str(tmp_path / "out"))
    assert where in str(exc.value) and msg in str(exc.value)
    assert not os.path.exists(tmp_path / "out")            # rejected before anything is written


def test_parquet_input(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    os.makedirs(tmp_path / "data")
    pq.write_table(pa.Table.from_pylist([{"id": "p", "prompt": "one two"}]), str(tmp_path / "data" / "x.parquet"))
    run_generation_job(_cfg(tmp_path), FakeLLM(), out_dir=str(tmp_path / "out"))
    assert _rows(tmp_path / "out")[0]["id"] == "p"


def test_run_job_dispatches_generation_kinds(tmp_path):
    from colibri_dist.jobs.pipeline import run_job
    os.makedirs(tmp_path / "data")
    _write(tmp_path / "data" / "in.jsonl", GOOD[:1])
    cfg = _cfg(tmp_path)
    cfg.model = str(tmp_path / "nosuch.colibri")
    with pytest.raises(InvalidArgument, match="nosuch.colibri: no such file"):
        run_job(cfg, out_dir=str(tmp_path / "out"))                # the default factory builds cd.LLM(model)
    assert not os.path.exists(tmp_path / "out")                    # rejected: --out not created
    made = []
    rep = run_job(cfg, out_dir=str(tmp_path / "out"), llm_factory=lambda c: made.append(FakeLLM()) or made[-1])
    assert rep["rows"] == 1 and rep["complete"] and _rows(tmp_path / "out")[0]["id"] == "a"
    assert made[0].closed


def test_messages_rows_without_a_chat_template(tmp_path):
    os.makedirs(tmp_path / "data")
    _write(tmp_path / "data" / "in.jsonl", GOOD[:3])
    rep = run_generation_job(_cfg(tmp_path), FakeLLM(template=None), out_dir=str(tmp_path / "out"))
    rows = _rows(tmp_path / "out")
    assert "no chat template" in rows[2]["error"] and "error" not in rows[0] and rep["errors"] == 1


def test_progress_log_lines(tmp_path):
    import io
    os.makedirs(tmp_path / "data")
    _write(tmp_path / "data" / "in.jsonl", GOOD)
    p = tmp_path / "job.yaml"
    p.write_text("job:\n  kind: generate\n  input: data\n  shard_rows: 2\nreport: {progress: log}\n")
    stream = io.StringIO()
    run_generation_job(load_config(str(p)), FakeLLM(), out_dir=str(tmp_path / "out"), stream=stream)
    lines = [line for line in stream.getvalue().splitlines() if " requests, " in line]
    assert lines[-1].endswith("ETA 0s") and "5/5 requests" in lines[-1] and "tokens generated" in lines[-1]
    assert "colibri run: generate summary" in stream.getvalue()        # then the summary table


def test_report_latency_throughput_timeline(tmp_path):
    os.makedirs(tmp_path / "data")
    _write(tmp_path / "data" / "in.jsonl", GOOD + [BAD[0][0]])
    rep = run_generation_job(_cfg(tmp_path), FakeLLM(), out_dir=str(tmp_path / "out"))
    run = rep["this_run"]
    assert run["latency"]["time_to_first_token_s"]["n"] == 5 == run["latency"]["request_latency_s"]["n"]
    lat = run["latency"]["request_latency_s"]
    assert 0 <= lat["p50"] <= lat["p90"] <= lat["p99"]
    tp = run["throughput"]
    if run["preemptions"] == 0:
        assert tp["decode_tokens"] == rep["generated_tokens"] - 5 and tp["prefill_tokens"] == rep["input_tokens"]
    else:                                       # recomputed tokens are prefill again
        assert tp["decode_tokens"] <= rep["generated_tokens"] - 5 and tp["prefill_tokens"] > rep["input_tokens"]
    assert tp["decode_tokens_per_s"] > 0 and tp["step_s"] > 0
    assert sum(b["finished"] for b in run["timeline"]) == 5 and run["timeline"][0]["t"] == 0
    with open(tmp_path / "out" / "report.json") as fh:
        assert json.load(fh)["this_run"]["latency"] == run["latency"]
    score_rep = run_generation_job(_cfg(tmp_path, kind="score"), FakeLLM(), out_dir=str(tmp_path / "s"))
    # the fake's score() takes no on_step: no timeline, the latencies still come from the results
    assert score_rep["this_run"]["timeline"] == [] and score_rep["this_run"]["latency"]["request_latency_s"]["n"] == 4
