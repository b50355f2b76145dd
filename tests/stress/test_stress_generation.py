"""`colibri stress --workload generation`: requests through a pool while workers are SIGKILLed and
experts hot-added/removed; every completion bit for bit equal to the in-process reference LLM.
One Ray (the stress run's own) in this module."""
import json

import pytest

from colibri_dist.cli import main as colibri
from colibri_dist.stress.generation import same_completion

pytest.importorskip("tokenizers")

CONFIG = """
model: null
demo_llm: {{layers: 2, experts: 8, cache_dir: {cache}}}
pool: {{workers: 2, threads_per_worker: 1, numa: {{enabled: false}}}}
stress:
  workload: generation
  duration_s: 12
  requests_per_wave: 8
  max_tokens: 8
  cache_fraction: 0.10
  hot_add: {{first_s: 2, every_s: 4}}
  hot_remove: {{first_s: 5, every_s: 6}}
  faults:
    kill_worker: {{first_s: 4, every_s: 8}}
    corrupt_spill: {{first_s: 3}}            # not part of this workload: listed as ignored
"""


@pytest.mark.ray
@pytest.mark.slow
def test_generation_stress_run_is_clean(tmp_path, capsys):
    cfg = tmp_path / "stress.yaml"
    cfg.write_text(CONFIG.format(cache=tmp_path / "cache"))
    code = colibri(["stress", str(cfg), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert code == 0 and rep["passed"] and rep["exit_code"] == 0, rep
    assert "colibri stress (generation) PASSED" in out
    assert rep["requests"] > 0 and rep["tokens"] > 0 and rep["requests"] % 8 == 0
    assert rep["mismatches"] == 0 and rep["lost_requests"] == 0 and rep["duplicated_requests"] == 0
    assert rep["faults_injected"].get("kill_worker", 0) >= 1
    assert rep["faults_recovered"] == rep["faults_injected"] and rep["faults_unrecovered"] == []
    assert rep["hot_adds"] >= 2 and rep["hot_removes"] >= 1 and rep["table_errors"] == []
    assert rep["pool"]["version"] >= rep["hot_adds"] + rep["hot_removes"]     # the table really changed
    assert rep["faults_ignored"] == ["corrupt_spill"]


def test_same_completion_is_exact():
    from colibri_dist.generate import Completion, TokenLogprobs
    lp = [TokenLogprobs(token_id=5, logprob=-0.25, rank=1, top=[(5, -0.25)])]
    a = Completion(prompt_token_ids=[1], token_ids=[5], text="x", finish_reason="length", logprobs=lp)
    b = Completion(prompt_token_ids=[1], token_ids=[5], text="x", finish_reason="length", logprobs=list(lp))
    assert same_completion(a, b)
    c = Completion(prompt_token_ids=[1], token_ids=[5], text="x", finish_reason="length",
                   logprobs=[TokenLogprobs(token_id=5, logprob=-0.25 + 2 ** -40, rank=1, top=[(5, -0.25)])])
    assert not same_completion(a, c)
    d = Completion(prompt_token_ids=[1], token_ids=[6], text="x", finish_reason="length", logprobs=lp)
    assert not same_completion(a, d)
