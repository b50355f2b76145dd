"""GGUF files made by llama.cpp's own tools, imported: every tensor kept bit for bit, logits beside llama.cpp's.

A tiny random Qwen3-MoE checkpoint (transformers; every matrix's rows in whole 256-element super-blocks; the
byte-level BPE of testing/random_llm.py, which llama.cpp's converter takes as a "gpt-2" pre-tokenizer) goes
through convert_hf_to_gguf.py (F32) and llama-quantize (Q4_K_M, Q5_K_M; with 8 experts Q4_K_M also puts attn_k
and attn_v in Q8_0 and attn_output in Q5_K), then `colibri convert`. Checked: llama-quantize mixed the types inside
the parts and every quantized tensor's blocks are in the container as they are in the file (decode ==
gguf.quants.dequantize); our logits are the same bits on every SIMD level and within 1e-4 of transformers run on
the file's dequantized values; and beside llama.cpp's own log-probabilities (llama-perplexity
--kl-divergence-base, f32 KV cache, no flash attention) on the same token ids: the F32 file agrees at every
position to the saved codes' precision (the same model, read from llama.cpp's converter), the K-quant files as
llama.cpp's arithmetic allows (it rounds each activation row to Q8_K blocks before the K-quant dot products, we
multiply float32 activations by the exactly decoded weights; the numbers are printed, and guarded loosely
against gross errors); in the default mode, which rounds activations to Q8_K (Q8_0) as llama.cpp does, our log-probs
are closer to llama.cpp's than in the exact-weights mode. Skipped, naming what is missing, without a llama.cpp
build ($COLIBRI_LLAMA_CPP).
"""
import json
import os

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist import convert
from colibri_dist.encodings import BY_NAME
from colibri_dist.errors import FormatError
from colibri_dist.format.layout import DTYPE_NAMES
from colibri_dist.format.quantize import block_bytes, dequantize
from colibri_dist.testing import llama_cpp

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
from gguf_tiny import dequantized_model  # noqa: E402  (needs gguf)
from test_format_gguf_mix import ENCODING, MATRIX, kept_matrices  # noqa: E402

TOOLS, MISSING = llama_cpp.find()
pytestmark = [pytest.mark.skipif(TOOLS is None, reason=MISSING or ""), pytest.mark.slow]   # ~40 s: 2 conversions
FILES = {"F32": (4, None), "Q4_K_M": (4, "Q4_K_M"), "Q5_K_M": (4, "Q5_K_M"), "Q4_K_M-8x": (8, "Q4_K_M")}


def write_checkpoint(path, n_experts, seed=0, moe_inter=256):
    """A Hugging Face Qwen3-MoE directory with the random_llm tokenizer; -> the transformers model."""
    import transformers
    from colibri_dist.testing.random_llm import CHAT_TEMPLATE, tokenizer
    tok = tokenizer()
    torch.manual_seed(seed)
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=256, intermediate_size=256, moe_intermediate_size=moe_inter,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=n_experts,
        num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=512, tie_word_embeddings=False,
        initializer_range=0.05, rms_norm_eps=1e-6, eos_token_id=tok.token_to_id("<|im_end|>"), bos_token_id=None)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    model.save_pretrained(path)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return model


def write_text(path, lines=900, seed=0):
    rng = np.random.default_rng(seed)
    words = ("the quick brown fox jumps over the lazy dog while a small bird sings in the tall green tree near the "
             "old stone bridge and children play with a red ball on the grass under the warm summer sun "
             '{"name": "get_weather", "city": "Paris"} 0 1 2 3 4 5 6 7 8 9 true false null').split()
    path.write_text("\n".join(" ".join(rng.choice(words, rng.integers(5, 16))) for _ in range(lines)))
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{file: (gguf, container, transformers model, llama.cpp's saved log-probs)}, text of 40 chunks of 128."""
    d = tmp_path_factory.mktemp("llama-cpp")
    text = write_text(d / "text.txt")
    out, f32 = {}, {}
    for name, (experts, ftype) in FILES.items():
        if experts not in f32:
            model = write_checkpoint(d / f"hf{experts}", experts)
            llama_cpp.convert_hf(TOOLS, d / f"hf{experts}", d / f"f32-{experts}.gguf")
            f32[experts] = (d / f"f32-{experts}.gguf", model)
        src, model = f32[experts]
        path = src if ftype is None else d / f"{name}.gguf"
        if ftype:
            llama_cpp.quantize(TOOLS, src, path, ftype)
        convert(path, d / f"{name}.colibri", progress=False)
        llama_cpp.save_logprobs(TOOLS, path, text, d / f"{name}.kld")
        out[name] = (path, d / f"{name}.colibri", model, llama_cpp.read_logprobs(d / f"{name}.kld"))
    return out


@pytest.mark.parametrize("name", [n for n in FILES if n != "F32"])
def test_llama_quantize_mixes_types_and_every_tensor_is_kept_bit_for_bit(made, name):
    path, container, model, _ = made[name]
    tensors = [t for t in gguf.GGUFReader(str(path)).tensors if t.tensor_type.name != "F32"]
    experts = {t.tensor_type.name for t in tensors if "_exps" in t.name}
    assert experts == {"Q4_K" if name.startswith("Q4") else "Q5_K", "Q6_K"}    # down_exps Q6_K on layer 1 only
    with cd.open_model(container) as m:
        head = "q6_k_r16" if model.config.vocab_size % 16 == 0 else "q6_k"     # q6_k_r16 takes whole 16-row groups
        assert m.config.scheme == "mixed" and m.dense_scheme == "mixed" and m.lm_head_scheme == head
        for t in tensors:
            raw = np.asarray(t.data).reshape(-1).view(np.uint8)
            mats = kept_matrices(m, t.name, m.config.n_experts)
            per = raw.size // len(mats)
            for i, (blob, ml) in enumerate(mats):
                want = raw[i * per:(i + 1) * per]
                laid = MATRIX[t.tensor_type.name]       # rows not in whole groups keep the plain encoding
                plain = t.name == "token_embd.weight" or ml.rows % BY_NAME[laid].row_group
                assert DTYPE_NAMES[ml.dtype] == (ENCODING if plain else MATRIX)[t.tensor_type.name], t.name
                blocks, kept_bytes = block_bytes(blob, ml)
                assert blocks == ENCODING[t.tensor_type.name] and kept_bytes.tobytes() == want.tobytes(), t.name
                oracle = gguf.quants.dequantize(want.reshape(ml.rows, -1), t.tensor_type)
                assert np.array_equal(dequantize(blob, ml).view(np.uint32),
                                      oracle.view(np.uint32)), t.name
        if name.endswith("8x"):     # llama.cpp's 8-expert rules: attn_k / attn_v Q8_0, attn_output Q5_K
            assert m.matrix_encodings()["dense"] == {"q4_k_r8": 2, "q5_k": 2, "q8_0": 4}


@pytest.mark.parametrize("name", list(FILES))
def test_logits_equal_transformers_on_the_files_values_on_every_level(made, name):
    from colibri_dist.native import simd_available, simd_force
    path, container, model, saved = made[name]
    ids = saved.tokens[0]
    got = {}
    for level in simd_available():
        with simd_force(level), cd.LLM(container, w8a8=False) as llm:
            got[level] = llm.logits(ids)
    assert all(np.array_equal(got["scalar"], g) for g in got.values()), list(got)
    with torch.no_grad():
        ref = dequantized_model(model, path)(torch.from_numpy(ids.astype(np.int64))[None]).logits[0].numpy()
    assert np.abs(got["scalar"] - ref).max() / np.abs(ref).max() <= 1e-4


@pytest.mark.parametrize("name", list(FILES))
def test_logits_beside_llama_cpps_on_the_same_file(made, name):
    _, container, _, saved = made[name]
    with cd.LLM(container, w8a8=False) as llm:
        r = llama_cpp.compare(saved, llm.logits)
    print(f"\n{name}: {r['positions']} positions, top-1 agreement {r['top1']:.4f} (+ {r['top1_code_ties']:.4f} ties "
          f"within a code step), mean KL {r['mean_kl']:.2e}, max |log-prob diff| {r['max_abs_logprob_diff']:.3g} "
          f"(code step {saved.step:.2g})")
    assert r["positions"] == 40 * 63
    if name == "F32":       # the same model: every position, to the saved codes' precision
        assert r["top1"] + r["top1_code_ties"] == 1.0 and r["top1"] >= 0.999
        assert r["max_abs_logprob_diff"] <= 2 * saved.step and abs(r["mean_kl"]) <= 1e-6
    else:                   # llama.cpp's Q8_K activations against our exact ones: a guard against gross errors
        assert r["top1"] >= 0.9 and r["mean_kl"] <= 0.01


@pytest.mark.parametrize("name", ["Q4_K_M", "Q5_K_M", "Q4_K_M-8x"])
def test_default_mode_rounds_activations_to_q8k_as_llama_cpp_and_lands_closer_to_it(made, name):
    """With the w8a8 switch on (the default) the k-quant matrices take llama.cpp's Q8_K activations (kernels_kq*.c)
    and the q8_0 ones its Q8_0 activations (kernels_q80*.c): beside llama.cpp's own log-probs that mode is far closer
    than the exact-weights mode (measured: Q4_K_M mean KL 1.25e-3 -> 3.9e-5, top-1 0.944 -> 0.992; Q5_K_M
    1.51e-3 -> 1.3e-5, 0.945 -> 0.994). The 8-expert file keeps attn_k / attn_v in Q8_0 (llama-quantize's choice):
    without the Q8_0 x Q8_0 path its default mode stayed as far as the exact one (mean KL 1.56e-3, top-1 0.939 vs
    1.49e-3, 0.947; this test failed), with it 3.8e-5 and 0.996. What still differs: the order the per-block terms
    are summed, attention and norm arithmetic."""
    _, container, _, saved = made[name]
    r = {}
    for mode, w8a8 in (("exact", False), ("q8k", True)):
        with cd.LLM(container, w8a8=w8a8) as llm:
            r[mode] = llama_cpp.compare(saved, llm.logits)
    print(f"\n{name}: " + "; ".join(f"{m} top-1 {v['top1']:.4f} mean KL {v['mean_kl']:.2e} max |dlogprob| "
                                    f"{v['max_abs_logprob_diff']:.3g}" for m, v in r.items()))
    assert r["q8k"]["mean_kl"] < r["exact"]["mean_kl"] / 10
    assert r["q8k"]["top1"] >= max(r["exact"]["top1"], 0.98)


def test_llama_quantize_fallback_blocks_are_kept_bit_for_bit(tmp_path):
    """Rows not in whole 256-element super-blocks make llama-quantize fall back (tensor_type_fallback): Q4_K ->
    Q5_0, Q6_K -> Q8_0 (GLM-4.5-Air's 1408-wide expert rows meet this). Both are kept: every expert's down blocks
    are the file's bytes and decode as gguf.quants does (Q5_0 was refused by name before the q5_0 encoding)."""
    write_checkpoint(tmp_path / "hf", 4, moe_inter=288)
    llama_cpp.convert_hf(TOOLS, tmp_path / "hf", tmp_path / "f32.gguf")
    log = llama_cpp.quantize(TOOLS, tmp_path / "f32.gguf", tmp_path / "q.gguf", "Q4_K_M")
    assert "falling back to    q5_0" in log and "falling back to    q8_0" in log
    reader = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "q.gguf")).tensors}
    assert reader["blk.0.ffn_down_exps.weight"].tensor_type.name == "Q5_0"
    assert reader["blk.1.ffn_down_exps.weight"].tensor_type.name == "Q8_0"
    convert(tmp_path / "q.gguf", tmp_path / "out.colibri", progress=False)
    with cd.open_model(tmp_path / "out.colibri") as m:
        for name in ("blk.0.ffn_down_exps.weight", "blk.1.ffn_down_exps.weight"):
            t = reader[name]
            q = np.asarray(t.data).reshape(4, 256, -1)
            for e, (blob, ml) in enumerate(kept_matrices(m, name, 4)):
                assert DTYPE_NAMES[ml.dtype] == t.tensor_type.name.lower()
                assert bytes(np.asarray(blob)[ml.data_offset:ml.data_offset + ml.data_bytes]) == q[e].tobytes()
                assert np.array_equal(dequantize(blob, ml).view(np.uint32),
                                      gguf.quants.dequantize(q[e], t.tensor_type).view(np.uint32))