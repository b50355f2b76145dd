"""Every matrix in 4 (or 6) bits, a separate LM-head encoding, presets and bytes per decode token
(`colibri convert --dense int4-g32|int4-g64|int6-g64 --lm-head S --preset NAME`), and their bad values."""
import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.cli import main
from colibri_dist.errors import InvalidArgument
from colibri_dist.format import spec, token_bytes
from colibri_dist.format.presets import PRESETS, resolve
from colibri_dist.format.quantize import dequantize


def _matrix_dtypes(path):
    with cd.open_model(path) as m:
        return {e.name: m.matrix(e.name)[1].dtype for e in m.entries if e.kind == spec.KIND_MATRIX}


@pytest.mark.parametrize("scheme,code", [("int4-g32", 8), ("int4-g64", 9), ("int6-g64", 10)])
def test_dense_int4_int6_put_every_matrix_in_their_bits(tiny_dir, tmp_path, scheme, code):
    src, _ = tiny_dir("qwen2_moe")
    dst = tmp_path / "m.colibri"
    cd.convert(src, dst, experts=scheme, dense=scheme, progress=False)
    dtypes = _matrix_dtypes(dst)
    assert "lm_head.weight" in dtypes and "model.layers.0.self_attn.q_proj.weight" in dtypes
    assert set(dtypes.values()) == {code}
    with cd.open_model(dst) as m:
        assert (m.dense_scheme, m.lm_head_scheme, m.config.scheme) == (scheme, scheme, scheme)
        blob, layout = m.matrix("model.layers.0.self_attn.q_proj.weight")
        w, ref = dequantize(blob, layout), m.tensor("model.layers.0.self_attn.q_proj.weight")
        assert float(np.sum(w * ref) / (np.linalg.norm(w) * np.linalg.norm(ref))) >= 0.98
        assert m.dense_mlp(0) is None or m.dense_mlp(0)[1].scheme == scheme
        m.verify(progress=False)


@pytest.mark.parametrize("head,code", [("int8", 3), ("int6-g64", 10)])
def test_lm_head_has_its_own_scheme(tiny_dir, tmp_path, head, code):
    src, _ = tiny_dir("qwen2_moe")
    dst = tmp_path / "m.colibri"
    cd.convert(src, dst, experts="int4-g64", dense="int4-g64", lm_head=head, progress=False)
    dtypes = _matrix_dtypes(dst)
    assert dtypes.pop("lm_head.weight") == code and set(dtypes.values()) == {9}
    with cd.open_model(dst) as m:
        assert m.lm_head_scheme == head and m.meta["lm_head_scheme"] == head
        m.verify(progress=False)


def test_tied_embedding_lm_head_takes_the_lm_head_scheme(tiny_dir, tmp_path):
    src, _ = tiny_dir("olmoe")
    import json
    cfg = json.loads((src / "config.json").read_text())
    tied = tmp_path / "src"
    tied.mkdir()
    for f in src.iterdir():
        (tied / f.name).symlink_to(f)
    (tied / "config.json").unlink()
    (tied / "config.json").write_text(json.dumps(dict(cfg, tie_word_embeddings=True)))
    dst = tmp_path / "m.colibri"
    cd.convert(tied, dst, experts="int8", dense="int4-g32", lm_head="f16", progress=False)
    with cd.open_model(dst) as m:
        assert m.lm_head_scheme == "f16"


def test_preset_fills_what_is_unset_and_explicit_choices_win():
    assert resolve("q4_k_m") == ("int4-g64", "int4-g64", "int6-g64")
    assert resolve("q4_k_m", lm_head="f16") == ("int4-g64", "int4-g64", "f16")
    assert resolve("q8_0", experts="int4-g32") == ("int4-g32", "int8", "int8")
    assert resolve() == ("int8", "int8", "int8")
    assert resolve(experts="int4-g32") == ("int4-g32", "int4-g32", "int4-g32")
    assert resolve(experts="int8", dense="int4-g64") == ("int8", "int4-g64", "int4-g64")
    assert set(PRESETS) >= {"q4_k_m", "q4_0", "q8_0"}


@pytest.mark.parametrize("kw,flag", [(dict(preset="q5_k"), "--preset"), (dict(lm_head="int3"), "--lm-head"),
                                     (dict(dense="int5"), "--dense"), (dict(experts="fp8"), "--experts")])
def test_bad_values_name_the_option(tiny_dir, tmp_path, kw, flag):
    src, _ = tiny_dir("qwen2_moe")
    with pytest.raises(InvalidArgument, match=flag):
        cd.convert(src, tmp_path / "m.colibri", progress=False, **kw)
    assert not (tmp_path / "m.colibri").exists()


@pytest.mark.parametrize("args,flag", [(["--lm-head", "int3"], "--lm-head"), (["--dense", "int5"], "--dense"),
                                       (["--preset", "q5_k"], "--preset")])
def test_cli_bad_values_exit_2_naming_the_flag(tiny_dir, tmp_path, capsys, args, flag):
    src, _ = tiny_dir("qwen2_moe")
    with pytest.raises(SystemExit) as exc:
        main(["convert", str(src), str(tmp_path / "m.colibri"), "--no-progress"] + args)
    assert exc.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_cli_help_and_convert_take_int6_g64(tiny_dir, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    assert capsys.readouterr().out.count("int6-g64") >= 3                # --experts, --dense, --lm-head choices
    src, _ = tiny_dir("qwen2_moe")
    dst = tmp_path / "m.colibri"
    assert main(["convert", str(src), str(dst), "--lm-head", "int6-g64", "--no-progress"]) == 0
    assert "(int8; dense int8; lm_head int6-g64;" in capsys.readouterr().out


def test_cli_preset_prints_bytes_per_token_beside_llama_cpp(tiny_dir, tmp_path, capsys):
    src, _ = tiny_dir("qwen2_moe")
    dst = tmp_path / "m.colibri"
    assert main(["convert", str(src), str(dst), "--preset", "q4_k_m", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "(int4-g64; dense int4-g64; lm_head int6-g64;" in out
    assert "bytes per decode token:" in out and "llama.cpp Q4_K_M of this model:" in out and "ratio" in out
    assert main(["inspect", str(dst)]) == 0
    assert "lm_head int6-g64" in capsys.readouterr().out


def test_ggml_bytes_follow_block_sizes_and_fallbacks():
    assert token_bytes.ggml_bytes("Q4_K", 10, 512) == 10 * 2 * 144
    assert token_bytes.ggml_bytes("Q6_K", 3, 256) == 3 * 210
    assert token_bytes.ggml_bytes("Q8_0", 2, 64) == 2 * 2 * 34
    assert token_bytes.ggml_bytes("Q6_K", 3, 96) == 3 * 3 * 34          # -> Q8_0
    assert token_bytes.ggml_bytes("Q4_K", 1, 96) == 3 * 22              # -> Q5_0
    assert token_bytes.ggml_bytes("Q4_K", 2, 40) == 2 * 40 * 2          # -> F16
    # llama.cpp's use_more_bits on 4 layers: the last two (i >= 7n/8, and (i - n/8) % 3 == 2)
    assert [token_bytes._use_more_bits(i, 4) for i in range(4)] == [False, False, True, True]
    with pytest.raises(ValueError, match="Q2_K"):
        token_bytes.llama_cpp_estimate(None, "Q2_K")


def test_bytes_per_token_count_what_a_decode_token_reads(tiny_dir, tmp_path):
    src, _ = tiny_dir("qwen2_moe")
    sizes = {}
    for preset in ("q8_0", "q4_k_m"):
        dst = tmp_path / f"{preset}.colibri"
        cd.convert(src, dst, preset=preset, progress=False)
        with cd.open_model(dst) as m:
            ours = token_bytes.ours(m)
            assert ours["lm_head"] == m._entry("lm_head.weight").nbytes
            assert ours["experts"] > m.config.top_k * m.expert_layout(0).nbytes     # + the shared expert
            peer = token_bytes.llama_cpp_estimate(m, PRESETS[preset][3])
            assert ours["routers"] == peer["routers"] > 0
            assert ours["total"] == sum(v for k, v in ours.items() if k != "total")
            sizes[preset] = ours["total"], peer["total"]
    assert sizes["q4_k_m"][0] < sizes["q8_0"][0] and sizes["q4_k_m"][1] < sizes["q8_0"][1]
