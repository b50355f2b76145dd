"""`python -m colibri_dist.bench calls`: Python calls per decode step on the serve path's engine (issue 30's target:
<= 200 at 4 layers with 1 sequence) on the 4-layer demo MoE, and the bench end to end. The count is cProfile's
(no timing), so the ceiling is deterministic for a given model, numpy and Python."""
import json

import pytest

import colibri_dist as cd
from colibri_dist.bench.generation import calls


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return calls.demo_model(str(tmp_path_factory.mktemp("calls")))


def test_a_decode_step_of_one_sequence_makes_at_most_200_python_calls(demo):
    with cd.LLM(demo, threads=1) as llm:
        one, st = calls.count_calls(llm, 1, steps=10)
        eight, _ = calls.count_calls(llm, 8, steps=10)
    assert one <= 200, calls.top_sites(st, 10, 15)
    assert one < eight                         # the per-sequence work is in the count
    sites = [site for _, site in calls.top_sites(st, 10, 40)]
    assert any("fused_forward" in s for s in sites) and any("update" in s for s in sites)


def test_bench_calls_end_to_end(demo, tmp_path, capsys):
    out = tmp_path / "calls.json"
    assert calls.main(["--model", demo, "--seqs", "1", "2", "--steps", "3", "--tok-s", "--repeats", "1",
                       "--top", "3", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert [r["seqs"] for r in got["results"]] == [1, 2]
    assert all(r["calls_per_step"] > 0 and r["decode_tok_s"] > 0 for r in got["results"])
    assert "seqs 2:" in capsys.readouterr().out
