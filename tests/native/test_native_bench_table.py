"""The kernels benchmark's table runs on a tiny layer and reports every mode x level x batch (no timing asserts)."""
import pytest

pytest.importorskip("transformers")

from colibri_dist.bench.kernels import table as kt  # noqa: E402
from colibri_dist.bench.kernels.table import MODES, bandwidth_markdown, kernels_table, levels_for, markdown  # noqa: E402
from colibri_dist.native import simd_available  # noqa: E402


def test_table_has_every_mode_level_and_batch(monkeypatch):
    monkeypatch.setattr(kt, "QUICK_BUDGET", True)
    cfg = dict(hidden=64, inter=32, experts=4, top_k=2)
    out = kernels_table(cfg, threads=1, bw=1e10, batches=[1, 4], log=lambda *a: None)
    levels = [lv for lv in simd_available() if lv != "scalar"] or ["scalar"]
    got = {(r["mode"], r["level"], r["n"]) for r in out["rows"]}
    assert got == {(m, lv, n) for m in MODES for lv in levels_for(m, levels) for n in (1, 4)}
    assert set(out["torch"]) == {"torch_fp32_n1", "torch_fp32_n4", "torch_bf16_n1", "torch_bf16_n4"}
    for r in out["rows"]:
        assert r["tokens_per_s"] > 0 and r["ratio_to_torch_bf16"] > 0 and 1 <= r["distinct_experts"] <= 4
    assert out["expert_bytes"]["int4-g32"] < out["expert_bytes"]["int8"]
    report = {"table": out, "config": {"batches": [1, 4]}}
    md = markdown(report)
    assert md.count("\n") == 2 + 2 + sum(len(levels_for(m, levels)) for m in MODES) and "| colibri int4-g32 (" in md
    assert bandwidth_markdown(report).count("| int8+w8a8 (") == len(levels)


def test_expert_shapes_rows_and_markdown():
    from colibri_dist.bench.kernels.shapes import MODES as SHAPE_MODES, expert_shapes, shapes_markdown
    rows = expert_shapes(threads=1, bw=1e10, hidden=64, inter=32, tokens=[1, 3], min_bytes=1 << 16, passes=1,
                         log=lambda *a: None)
    assert {(r["mode"], r["tokens"]) for r in rows} == {(m, n) for m in SHAPE_MODES for n in (1, 3)}
    for r in rows:
        assert r["seconds"] > 0 and r["gb_per_s"] > 0 and r["speedup_vs_weight_only"] > 0
        assert r["speedup_vs_weight_only"] == 1.0 or "+" in r["mode"]
    md = shapes_markdown(rows)
    assert md.count("\n") == 2 + len(SHAPE_MODES) and "| int4-g64+w4a8 |" in md
