"""`python -m colibri_dist.bench levels` runs end to end on tiny shapes: one row per (mode, tokens, level) of
every level asked for that this CPU has, and a level it lacks is skipped with a message naming it."""
import json

from colibri_dist.bench.kernels.levels import main
from colibri_dist.native import simd_levels


def test_bench_levels_writes_a_row_per_mode_token_count_and_available_level(tmp_path, capsys):
    have = [lv for lv, missing in simd_levels().items() if missing is None]
    out = tmp_path / "levels.json"
    asked = ["scalar", "avx2", "avx512", "amx"]
    assert main(["--threads", "2", "--rounds", "2", "--levels", ",".join(asked), "--tokens", "1,3",
                 "--hidden", "64", "--inter", "32", "--mib", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    want = {(m, n, lv) for m in ("int4-g64+w4a8", "int4-g32+w4a8", "int8+w8a8") for n in (1, 3)
            for lv in asked if lv in have}
    assert {(r["mode"], r["tokens"], r["level"]) for r in rows} == want
    assert all(len(r["seconds_rounds"]) == 2 and r["seconds_median"] > 0 for r in rows)
    err = capsys.readouterr().err
    for lv in asked:
        assert (f"level {lv} skipped" in err) == (lv not in have)
