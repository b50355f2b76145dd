"""The generation job and `colibri generate` end to end on a real cd.LLM (the demo language model)."""
import json
import os

import pytest

import colibri_dist as cd
from colibri_dist.cli import main
from colibri_dist.config import load_config
from colibri_dist.demos import llm as demo_llm
from colibri_dist.jobs.pipeline import run_job

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo-llm")
    demo_llm.write_checkpoint(str(root / "hf"), layers=2, n_experts=8)
    cd.convert(str(root / "hf"), str(root / "m.colibri"), progress=False)
    rows = demo_llm.prompts(12, max_tokens=6)
    os.makedirs(root / "data")
    with open(root / "data" / "in.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
        fh.write(json.dumps({"id": "bad", "prompt_token_ids": [10 ** 6]}) + "\n")
    return root, rows


def _job(root, kind="generate", extra=""):
    p = root / f"{kind}.yaml"
    p.write_text(f"job:\n  kind: {kind}\n  input: data\n{extra}model: m.colibri\npool: {{workers: 0}}\n"
                 f"report: {{progress: none}}\n")
    return load_config(str(p))


def _rows(out):
    with open(out / "in.jsonl") as fh:
        return [json.loads(line) for line in fh]


def test_generate_job_on_the_demo_llm(demo):
    root, rows = demo
    rep = run_job(_job(root), out_dir=str(root / "out"))
    got = _rows(root / "out")
    assert rep["rows"] == 13 and rep["errors"] == 1 and "outside the vocabulary" in got[-1]["error"]
    acc = demo_llm.task_accuracy(rows, [r["generated_text"] for r in got[:-1]])
    assert acc["accuracy"] == 1.0, acc
    assert rep["this_run"]["latency"]["time_to_first_token_s"]["n"] == 12
    pc = rep["this_run"]["prefix_cache"]                      # prefix caching is on by default
    assert pc["enabled"] and pc["queried_tokens"] >= 12 and 0 <= pc["hit_tokens"] <= pc["queried_tokens"]
    small = run_job(_job(root, extra="  batch_tokens: 5\n  prefill_chunk: 2\n  max_num_seqs: 3\n"),
                    out_dir=str(root / "out-small"))
    assert small["rows"] == 13
    assert (root / "out" / "in.jsonl").read_bytes() == (root / "out-small" / "in.jsonl").read_bytes()


def test_score_job_on_the_demo_llm(demo):
    root, rows = demo
    run_job(_job(root, "score"), out_dir=str(root / "score"))
    got = _rows(root / "score")
    with cd.LLM(str(root / "m.colibri")) as llm:
        want = llm.score([r["prompt"] for r in rows])
    assert [g["prompt_logprobs"] for g in got[:-1]] == [w.token_logprobs for w in want]


def test_cli_generate_streams_the_demo(demo, capsys):
    root, _ = demo
    assert main(["generate", str(root / "m.colibri"), "count: seven eight", "--max-tokens", "4"]) == 0
    out, err = capsys.readouterr()
    assert out == "nine ten eleven twelve\n" and "4 generated (finish: length)" in err
