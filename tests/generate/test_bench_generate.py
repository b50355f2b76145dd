"""`python -m colibri_dist.bench generate` runs and writes its JSON (a smoke test; no timing asserts)."""
import json

from colibri_dist.bench.generation.generate import main


def test_bench_generate_writes_json(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["--vocab", "300", "--seqs", "3", "--max-tokens", "4", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for name in ("greedy", "top_p", "penalties"):
        r = res["around_model"][name]
        assert r["tokens"] == 12 and r["wall_s"] >= r["model_s"] >= 0
    assert "us/token" in capsys.readouterr().out
    assert main(["--vocab", "300", "--seqs", "2", "--max-tokens", "2", "--flat"]) == 0
