"""`python -m colibri_dist.bench model_ops --quick` runs end to end and writes its documented JSON."""
import json

from colibri_dist.bench.kernels.ops import main


def test_quick_bench_writes_every_case(tmp_path, capsys):
    path = tmp_path / "m.json"
    assert main(["--quick", "--threads", "1", "--json", str(path)]) == 0
    assert "attention mla_decode" in capsys.readouterr().out
    d = json.loads(path.read_text())
    assert d["bench"] == "model_ops" and d["threads"] == 1
    assert {(r["scheme"], r["n"]) for r in d["matmul"]} == {(s, n) for s in ("f32", "bf16", "int8") for n in (1, 16)}
    assert [r["case"] for r in d["attention"]] == ["gqa_decode", "gqa_decode", "gqa_prefill", "mla_decode"]
    for r in d["matmul"] + d["attention"]:
        assert r["ms"] > 0 and r["torch_fp32_ms"] > 0
