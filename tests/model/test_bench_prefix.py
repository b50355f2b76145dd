"""`python -m colibri_dist.bench prefix` runs on a tiny model, finds the shared prefix and writes its JSON
with the same bits with and without the cache (a smoke test; no timing asserts)."""
import json

import colibri_dist as cd
from colibri_dist.bench.generation.prefix import main
from colibri_dist.demos import llm as demo_llm


def test_bench_prefix_writes_json(tmp_path, capsys):
    demo_llm.write_checkpoint(str(tmp_path / "hf"), layers=2, n_experts=4)
    model = cd.convert(str(tmp_path / "hf"), str(tmp_path / "m.colibri"), progress=False)
    out = tmp_path / "b.json"
    assert main(["--model", str(model), "--rows", "5", "--prefix-tokens", "40", "--suffix-tokens", "3",
                 "--threads", "1", "--max-num-batched-tokens", "48", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["same_bits"] is True and res["off"]["hit_tokens"] == 0
    # 48-token steps: row 0 computes the 40-token prefix (2 full blocks); rows 1-4 wait for that step (their
    # blocks are being computed) and then find both blocks
    on = res["on"]
    assert on["queried_tokens"] == 5 * 43 and on["hit_tokens"] == 4 * 32 and on["tokens_fed"] == 5 * 43 - 4 * 32
    assert "same bits: True" in capsys.readouterr().out
