"""`python -m colibri_dist.bench template` end to end on one round: the variants render the same text (the bench
raises otherwise), the worker's numbers are there, and every hostile template ends in a named bound or error."""
import json

from colibri_dist.bench.generation import template


def test_the_bench_runs_and_every_hostile_template_is_refused(tmp_path):
    out = tmp_path / "t.json"
    assert template.main(["--templates", str(tmp_path), "--rounds", "1", "--renders", "3", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert set(r["mixtral"]) == {"plain", "process"} and all(v[0] > 0 for v in r["mixtral"].values())
    assert "qwen3" not in r                                   # no templates directory: only the built-in one
    assert r["worker"]["rss_mib"] > 0 and r["worker"]["cold_start_ms"] > 0
    assert set(r["neighbour"]) == {"quiet", "process"}
    time_bound, memory_bound = "rendering took longer than 2 s (TemplateLimits.timeout_s)", \
        "rendering needed more than 64 MiB"
    want = {"spin": (time_bound,), "repeat": (memory_bound,),
            "out-loops": ("the rendered text would be more than 20000 characters",),
            "nested-lists": (time_bound, memory_bound),   # grows slowly: whichever bound it meets first (seen both)
            "recursion": ("chat template raised RecursionError",)}
    for name, texts in want.items():
        message = r["hostile"][f"{name}/process"]["message"]
        assert any(text in message for text in texts), (name, r["hostile"][f"{name}/process"])
