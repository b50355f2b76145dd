"""`python -m colibri_dist.bench peer`: argument parsing, round schedule, medians, ratios and tables,
on a made-up report (the benchmark itself needs a llama.cpp build and is never run by the tests)."""
import pytest

from colibri_dist.bench.model import peer, peer_llama
from colibri_dist.bench.model.peer_table import markdown, summarize


def test_defaults_and_lists():
    a = peer.parse_args(["--llama-bin", "/x/bin"])
    assert a.types == ["Q8_0", "Q4_0", "Q4_K_M"] and a.parallel == [1, 8, 32] and a.rounds == 2
    assert a.prompt == 512 and a.decode_prompt == 64 and a.engines[0] == "colibri int8"
    a = peer.parse_args(["--llama-bin", "b", "--types", "Q4_K_M", "--parallel", "1,4", "--engines", "colibri int8"])
    assert a.types == ["Q4_K_M"] and a.parallel == [1, 4] and a.engines == ["colibri int8"]


@pytest.mark.parametrize("argv,flag", [([], "--llama-bin"), (["--llama-bin", "b", "--parallel", "1,x"], "--parallel"),
                                       (["--llama-bin", "b", "--engines", "colibri fp8"], "--engines"),
                                       (["--llama-bin", "b", "--rounds", "0"], "--rounds"),
                                       (["--llama-bin", "b", "--parallel", "0"], "--parallel")])
def test_bad_arguments_exit_2_naming_the_flag(capsys, argv, flag):
    with pytest.raises(SystemExit) as exc:
        peer.parse_args(argv)
    assert exc.value.code == 2 and flag in capsys.readouterr().err


def test_an_imported_column_asks_for_llama_cpps_file_of_its_type():
    """The imported Q4_K_M column runs on llama.cpp's Q4_K_M file: asking for it adds that type to --types."""
    from colibri_dist.bench.model import peer_colibri
    name = "colibri imported llama.cpp Q4_K_M + Q8_K"
    a = peer.parse_args(["--llama-bin", "b", "--types", "Q8_0", "--engines", f"colibri int8,{name}"])
    assert a.types == ["Q8_0", "Q4_K_M"] and a.engines == ["colibri int8", name]
    assert peer_colibri.COLUMNS[name] == {"w8a8": True} and peer_colibri.encodings(name) == "imported llama.cpp Q4_K_M"
    f16 = name + " (f16 KV)"           # the same file with llama-batched-bench's own KV cache type
    assert peer_colibri.COLUMNS[f16] == {"w8a8": True, "kv_cache_dtype": "f16"}
    assert peer.parse_args(["--llama-bin", "b"]).engines[-2:] == [name, f16]     # default columns


def test_missing_llama_build_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="llama-batched-bench is missing"):
        peer_llama.tools(tmp_path / "bin")


def test_schedule_alternates_and_reverses():
    names = peer.interleave(["llama.cpp Q8_0", "llama.cpp Q4_0"], ["colibri a", "colibri b", "colibri c"])
    assert names == ["llama.cpp Q8_0", "colibri a", "llama.cpp Q4_0", "colibri b", "colibri c"]
    order = peer.schedule(names, 3)
    assert order[0] == names and order[1] == names[::-1] and order[2] == names


def test_parse_batched_reads_jsonl_lines_only():
    out = ("main: n_kv_max = 4096\n"
           '{"n_kv_max": 4096, "pp": 64, "tg": 32, "pl": 8, "n_kv": 768, "t_pp": 2.0, "speed_pp": 256.0, '
           '"t_tg": 4.0, "speed_tg": 64.0, "t": 6.0, "speed": 128.0}\nllama_perf: done\n')
    got = peer_llama.parse_batched(out)
    assert got == {8: {"prefill_tok_s": 256.0, "decode_tok_s": 64.0, "t_pp": 2.0, "t_tg": 4.0, "n_kv": 768}}
    with pytest.raises(RuntimeError, match="no JSONL"):
        peer_llama.parse_batched("error: model not found\n")


def _engine(load, pre, dec):
    return {"load_before": load, "runs": {"512x32": {"1": {"prefill_tok_s": pre}},
                                          "64x32": {str(pl): {"decode_tok_s": v} for pl, v in dec.items()}}}


def _report():
    rounds = []
    for r, scale in enumerate((1.0, 0.5, 2.0)):
        rounds.append({"read_bandwidth": {"bytes_per_s": 20e9 * scale, "load_before": 1.0 + r},
                       "engines": {"llama.cpp Q8_0": _engine(1.5, 200 * scale, {1: 50 * scale, 8: 80 * scale}),
                                   "llama.cpp Q4_K_M": _engine(2.5, 300 * scale, {1: 100 * scale, 8: 90 * scale}),
                                   "colibri int8": _engine(3.5, 240 * scale, {1: 60 * scale, 8: 180 * scale})}})
    return {"rounds": rounds, "bytes_per_token": {"llama.cpp Q8_0": 400e6, "llama.cpp Q4_K_M": 250e6,
                                                  "colibri int8": 372e6}}


def test_summary_medians_ratios_and_bandwidth():
    s = summarize(_report(), 512, 64, 32, [1, 8])
    assert s["metrics"] == ["prefill 1x512", "decode 1 seq", "decode 8 seq"]
    assert s["engines"]["colibri int8"]["decode 8 seq"]["median"] == 180
    assert s["engines"]["colibri int8"]["decode 8 seq"]["values"] == [180, 90, 360]
    assert s["engines"]["llama.cpp Q4_K_M"]["prefill 1x512"]["loads"] == [2.5, 2.5, 2.5]
    assert s["read_bandwidth_median"] == 20e9
    r = s["ratios"]["colibri int8"]
    assert r["decode 1 seq"] == {"ratio": 0.6, "vs": "llama.cpp Q4_K_M"}
    assert r["decode 8 seq"] == {"ratio": 2.0, "vs": "llama.cpp Q4_K_M"}
    assert r["prefill 1x512"]["ratio"] == pytest.approx(0.8)
    assert s["bandwidth"]["colibri int8"]["ratio_to_bandwidth"] == pytest.approx(372e6 * 60 / 20e9)
    assert "llama.cpp Q8_0" not in s["ratios"]


def test_markdown_tables():
    text = markdown(summarize(_report(), 512, 64, 32, [1, 8]))
    assert "| engine | prefill 1x512 | decode 1 seq | decode 8 seq | load avg before (per round) |" in text
    assert "| colibri int8 | 240 | 60.0 | 180 | 3.5, 3.5, 3.5 |" in text
    assert "| colibri int8 | 372.0 MB | 22.3 GB/s | 1.12 |" in text
    assert "| colibri int8 | 0.80x (Q4_K_M) | 0.60x (Q4_K_M) | 2.00x (Q4_K_M) |" in text
    assert "20.0 GB/s (rounds: 20.0 at load 1.0, 10.0 at load 2.0, 40.0 at load 3.0)" in text
