"""`python -m colibri_dist.bench gguf-quality`: its tables on a made-up report, llama-perplexity's statistics read
back, and the benchmark itself on one tiny family: our modes against the transformers float32 model (runs in CI),
and with a llama.cpp build the whole of it (colibri on the imported files beside llama.cpp on the same files;
skipped naming what is missing without one)."""
import json

import numpy as np
import pytest

from colibri_dist.bench.format import gguf_quality, gguf_quality_table
from colibri_dist.testing import llama_cpp

KL_LOG = """0.00.228.755 I kl_divergence: 0.11 seconds per pass - ETA 0.01 minutes
====== Perplexity statistics ======
Mean PPL(Q)                   : 561.500971 ±   7.671447
Mean PPL(base)                : 547.453996 ±   7.389882
Mean PPL(Q)/PPL(base)         :   1.025659 ±   0.004077
Mean PPL(Q)-PPL(base)         :  14.046975 ±   2.219890
====== KL divergence statistics ======
Mean    KLD:   0.019248 ±   0.000443
Maximum KLD:   0.215979
Same top p: 67.421 ± 0.934 %
"""


def test_parse_kl_reads_llama_perplexitys_statistics():
    got = llama_cpp.parse_kl(KL_LOG)
    assert got == {"ppl_q": 561.500971, "ppl_base": 547.453996, "mean_kl": 0.019248, "max_kl": 0.215979,
                   "top1": pytest.approx(0.67421)}
    with pytest.raises(ValueError, match="printed no mean_kl, top1, max_kl"):      # the lost-tail log (issue 22142)
        llama_cpp.parse_kl(KL_LOG.split("====== KL")[0])


def _saved(logprobs, tokens, coded=None):
    first = tokens.shape[1] // 2
    coded = np.ones(logprobs.shape, bool) if coded is None else coded
    return llama_cpp.SavedLogprobs(tokens, logprobs, coded, np.zeros(logprobs.shape[:2] + (1,), np.float32), first)


def test_compare_saved_and_saved_ppl():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 5, (3, 8)).astype(np.int32)
    a = llama_cpp.log_softmax(rng.normal(size=(3, 3, 5))).astype(np.float32)
    b = llama_cpp.log_softmax(a + rng.normal(scale=0.3, size=a.shape)).astype(np.float32)
    same = llama_cpp.compare_saved(_saved(a, tokens), _saved(a, tokens))
    assert same["top1"] == 1.0 and abs(same["mean_kl"]) < 1e-6
    diff = llama_cpp.compare_saved(_saved(a, tokens), _saved(b, tokens))
    want = float((np.exp(a.astype(np.float64)) * (a - b.astype(np.float64))).sum(-1).mean())
    assert diff["mean_kl"] == pytest.approx(want, rel=1e-4) and diff["positions"] == 9
    nxt = tokens[:, 5:]
    coded = np.ones(a.shape, bool)
    coded[0, 0, nxt[0, 0]] = False
    ppl, clipped = llama_cpp.saved_ppl(_saved(a, tokens, coded))
    picked = np.take_along_axis(a, nxt[..., None], -1)
    assert ppl == pytest.approx(float(np.exp(-picked.mean())), rel=1e-5) and clipped == pytest.approx(1 / 9)
    with pytest.raises(ValueError, match="not of the same tokens"):
        llama_cpp.compare_saved(_saved(a, tokens), _saved(b, tokens + 1))


def _mode(kl, top1, bits):
    return {"mean_kl": kl, "top1": top1, "bits_per_weight": bits}


REPORT = {"ctx": 128, "chunks": 40, "llama_cpp_missing": None, "models": [
    {"model": "fam_a", "reference": "llama.cpp on the F32 file",
     "modes": {"int8": _mode(1e-3, 0.95, 8.13), "q4_k_m preset": _mode(4e-2, 0.5, 4.55),
               "imported Q4_K_M": _mode(2e-2, 0.67, 5.03)},
     "llama_cpp": {"F32": {"ppl": 500.0}, "Q8_0": _mode(1e-3, 0.951, 0), "Q4_K_M": _mode(2e-2, 0.674, 0)},
     "llama_cpp_bits_per_weight": {"F32": 32.0, "Q8_0": 8.5, "Q4_K_M": 5.03},
     "same_file": {"F32": {"positions": 2520, "top1": 0.9996, "top1_code_ties": 0.0004, "mean_kl": 3e-7,
                           "max_abs_logprob_diff": 1e-4, "ppl": 500.1, "ppl_llama_cpp": 500.0, "ppl_ratio": 1.0002},
                   "Q8_0": {"positions": 2520, "top1": 0.975, "top1_code_ties": 0.001, "mean_kl": 3e-5,
                            "max_abs_logprob_diff": 0.2, "ppl": 501.0, "ppl_llama_cpp": 500.5, "ppl_ratio": 1.001}},
     "llama_cpp_itself": {"Q8_0": {"top1": 0.977, "mean_kl": 2.5e-5, "max_kl": 0.1}}},
    {"model": "fam_b", "reference": "llama.cpp on the F32 file",
     "modes": {"int8": _mode(2e-3, 0.9, 8.13), "q4_k_m preset": _mode(8e-2, 0.4, 4.57),
               "imported Q4_K_M": _mode(4e-2, 0.6, 5.03)},
     "llama_cpp": {"F32": {"ppl": 400.0}, "Q8_0": _mode(2e-3, 0.9, 0), "Q4_K_M": _mode(5e-2, 0.6, 0)},
     "llama_cpp_bits_per_weight": {"F32": 32.0, "Q8_0": 8.5, "Q4_K_M": 5.03}, "same_file": {}},
    {"model": "fam_c", "skipped": "RuntimeError: convert_hf_to_gguf.py failed"}]}


def test_tables_and_the_closest_four_bit_mode():
    ratios, best = gguf_quality_table.closest_four_bit(REPORT)
    assert set(ratios) == {"q4_k_m preset", "imported Q4_K_M"}        # int8 is not a 4-bit mode
    assert ratios["imported Q4_K_M"]["kl_ratio"] == pytest.approx((2e-2 / 2e-2 * 4e-2 / 5e-2) ** 0.5)
    assert ratios["q4_k_m preset"]["bits_per_weight"] == pytest.approx(4.56)
    assert best == "q4_k_m preset"          # ours within 0.5 bits of Q4_K_M's (the imported file is llama.cpp's)
    text = gguf_quality_table.markdown(REPORT)
    assert "| fam_a | F32 | 2520 | 0.9996 (+0.0004) | 3.00e-07 | 0.0001 | 500.100 | 500.000 | 1.00020 | - |" in text
    assert "| fam_a | Q8_0 | 2520 | 0.9750 (+0.0010) | 3.00e-05 | 0.2 | 501.000 | 500.500 | 1.00100 | " \
           "0.9770 / 2.50e-05 |" in text            # beside llama.cpp --no-repack against llama.cpp
    assert "| colibri q4_k_m preset | 4.55-4.57 | 4.00e-02 / 0.500 | 8.00e-02 / 0.400 |" in text
    assert "| llama.cpp Q4_K_M (its --kl-divergence) | 5.03 | 2.00e-02 / 0.674 | 5.00e-02 / 0.600 |" in text
    assert "Q4_K_M with the lowest mean KL: q4_k_m preset (1.789 x Q4_K_M's)." in text
    assert "Skipped fam_c: RuntimeError: convert_hf_to_gguf.py failed" in text


@pytest.mark.parametrize("argv,flag", [(["--families", "llama"], "--families"), (["--modes", "int3"], "--modes"),
                                       (["--ctx", "7"], "--ctx")])
def test_bad_arguments_exit_2_naming_the_flag(capsys, argv, flag):
    with pytest.raises(SystemExit) as exc:
        gguf_quality.parse_args(argv)
    assert exc.value.code == 2 and flag in capsys.readouterr().err


def test_our_modes_against_the_float32_model_on_one_family(tmp_path):
    """No llama.cpp: the reference is transformers in float32 on the text's tokens; int8 sits closer than 4-bit."""
    pytest.importorskip("torch")
    out = tmp_path / "q.json"
    assert gguf_quality.main(["--families", "qwen3_moe", "--no-llama", "--ctx", "16", "--chunks", "2", "--modes",
                              "int8,q4_k_m preset,imported Q4_K_M", "--work", str(tmp_path), "--json", str(out)]) == 0
    rec, = json.loads(out.read_text())["models"]
    assert rec["reference"] == "transformers float32" and set(rec["modes"]) == {"int8", "q4_k_m preset"}
    int8, q4 = rec["modes"]["int8"], rec["modes"]["q4_k_m preset"]
    assert int8["positions"] == q4["positions"] == 2 * 7
    assert 0 < int8["mean_kl"] < q4["mean_kl"] and 0 <= q4["top1"] <= int8["top1"] <= 1
    assert 8.0 < int8["bits_per_weight"] < 8.3 and 4.5 < q4["bits_per_weight"] < 4.7


def test_the_scoring_is_exact_on_a_float32_container(tmp_path):
    """colibri's float32 container of the same checkpoint scores KL ~0 and top-1 1 against the reference."""
    pytest.importorskip("torch")
    from colibri_dist.bench.format import gguf_quality_models as models, gguf_quality_ours as ours
    from colibri_dist.format.convert import convert
    model = models.write_family("olmoe", tmp_path / "hf")
    ref = ours.reference(model, ours.tokens(tmp_path / "hf", models.text(tmp_path / "t.txt"), 16, 2))
    convert(tmp_path / "hf", tmp_path / "f32.colibri", experts="f32", progress=False)
    got = ours.score(tmp_path / "f32.colibri", ref, {"w8a8": False})
    assert got["top1"] == 1.0 and abs(got["mean_kl"]) < 1e-8 and got["max_abs_logprob_diff"] < 1e-4
    assert got["bits_per_weight"] == pytest.approx(32.0, abs=0.01)


TOOLS, MISSING = llama_cpp.find()


@pytest.mark.slow
@pytest.mark.skipif(TOOLS is None, reason=MISSING or "")
def test_the_whole_benchmark_beside_llama_cpp(tmp_path):
    out = tmp_path / "q.json"
    assert gguf_quality.main(["--families", "qwen3_moe", "--ctx", "64", "--chunks", "4", "--modes",
                              "int8,imported Q4_K_M,imported Q8_0", "--work", str(tmp_path), "--json", str(out)]) == 0
    rec, = json.loads(out.read_text())["models"]
    f32 = rec["same_file"]["F32"]           # the same model read from llama.cpp's own file: the same numbers
    assert f32["top1"] + f32["top1_code_ties"] == 1.0 and abs(f32["mean_kl"]) <= 1e-6
    assert abs(f32["ppl_ratio"] - 1) <= 1e-3
    for typ in ("Q8_0", "Q4_K_M"):
        peer = rec["llama_cpp"][typ]
        assert peer["mean_kl"] > 0 and peer["saved_mean_kl"] == pytest.approx(peer["mean_kl"], rel=0.05, abs=2e-5)
        assert rec["same_file"][typ]["positions"] == 4 * 31
        own = rec["llama_cpp_itself"][typ]         # llama.cpp --no-repack against its default run of the file
        assert 0 <= own["mean_kl"] and 0 < own["top1"] <= 1
    assert rec["llama_cpp_bits_per_weight"]["Q4_K_M"] == pytest.approx(rec["modes"]["imported Q4_K_M"]
                                                                       ["bits_per_weight"], abs=0.05)
