"""GGUF import (colibri convert MODEL.gguf): a tiny random Qwen3-MoE written as llama.cpp writes it, imported.

F32: the imported container's logits equal the safetensors-converted container's bit for bit, and transformers'
within the oracle tolerance. Q8_0, IQ4_XS / IQ4_NL, MXFP4_MOE's MXFP4: every block is copied (container bytes ==
GGUF bytes, decode == gguf.quants.dequantize exactly), the logits equal transformers' on the dequantized weights,
and every SIMD level gives the same bits (the K-quant mixes of Q4_K_M / Q5_K_M files: test_format_gguf_mix.py).
The tokenizer and chat template come from the metadata: token ids equal the original tokenizer's. Bad files are
refused naming the file and the key or tensor, with nothing written.
"""
import json
import os
import re

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist import convert
from colibri_dist.errors import FormatError
from colibri_dist.format.quantize import block_bytes, dequantize

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
from gguf_tiny import dequantized_model, tensor_type, write_gguf  # noqa: E402  (needs gguf)

Q8 = gguf.GGMLQuantizationType.Q8_0
TEXTS = ["Hello world", " don't stop", "12345 apples\n\n  indented\tline", "Ünïcødé straße 東京",
         "<|im_start|>user\nhi there<|im_end|>", "a  b   c    ", "x=1;y=22;z=333"]
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def logits(path, ids, simd=None):
    from colibri_dist.native import simd_force
    with simd_force(simd or cd.native.simd_name()), cd.LLM(path, w8a8=False) as llm:
        return llm.logits(ids)


def reference(model, ids):
    with torch.no_grad():
        return model(torch.from_numpy(np.asarray(ids))[None]).logits[0].float().numpy()


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def tiny_f32(tmp_path_factory, family):
    """(hf container, gguf file, imported container, transformers model) of a family's tiny model in F32."""
    from colibri_dist.format.tiny import write_tiny
    d = tmp_path_factory.mktemp(f"gguf-{family}")
    model = write_tiny(family, d / "hf")
    write_gguf(model, d / "m.gguf")
    convert(d / "hf", d / "hf.colibri", experts="f32", progress=False)
    convert(d / "m.gguf", d / "g.colibri", progress=False)
    return d / "hf.colibri", d / "m.gguf", d / "g.colibri", model


@pytest.fixture(scope="module")
def f32(tmp_path_factory):
    return tiny_f32(tmp_path_factory, "qwen3_moe")


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe"])
def test_f32_import_equals_the_safetensors_conversion_bit_for_bit(f32, tmp_path_factory, family):
    hf_path, _, path, model = f32 if family == "qwen3_moe" else tiny_f32(tmp_path_factory, family)
    ids = np.random.default_rng(3).integers(0, 64, 40)
    got = logits(path, ids)
    assert np.array_equal(got, logits(hf_path, ids))
    assert rel_err(got, reference(model, ids)) <= 1e-4
    with cd.open_model(path) as m, cd.open_model(hf_path) as h:
        assert m.config == h.config and m.config.scheme == "f32" and m.dense_scheme == m.lm_head_scheme == "f32"
        assert m.meta["source_config"]["rms_norm_eps"] == model.config.rms_norm_eps
        assert m.meta["source_config"]["norm_topk_prob"] == (family == "qwen3_moe")     # llama.cpp's graph
        assert m.config.shared_inter == (24 if family == "qwen2_moe" else 0) and m.tokenizer_files() == {}


def tokenizer_and_writer():
    """A byte-level BPE with Qwen2's pre-tokenizer trained on TEXTS, and a GGUFWriter hook storing it the way
    llama.cpp's converter does (tokens, merges, token types, special ids, chat template)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from colibri_dist.format.gguf_tokenizer import PRE_TOKENIZERS
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRE_TOKENIZERS["qwen2"].pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(TEXTS * 3, trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    spec = json.loads(tok.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["merges"]]

    def write(w):
        n = tok.get_vocab_size()
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list([tok.id_to_token(i) for i in range(n)])
        w.add_token_types([gguf.TokenType.CONTROL if tok.id_to_token(i) in specials else gguf.TokenType.NORMAL
                           for i in range(n)])
        w.add_token_merges(merges)
        w.add_bos_token_id(0)
        w.add_eos_token_id(2)
        w.add_add_bos_token(False)
        w.add_chat_template(TEMPLATE)
    return tok, write


@pytest.fixture(scope="module")
def q8(tmp_path_factory):
    """A tiny Qwen3-MoE with sizes in whole Q8_0 blocks and a 320-token vocabulary, written as a Q8_0 GGUF
    (router F32) with a tokenizer, and imported: (gguf path, stored arrays, container, model, tokenizer)."""
    import transformers
    from colibri_dist.format.tiny import _COMMON
    torch.manual_seed(1)
    cfg = transformers.Qwen3MoeConfig(**dict(_COMMON, vocab_size=320, hidden_size=64, intermediate_size=64,
                                             moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                                             norm_topk_prob=True, head_dim=16))
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    d = tmp_path_factory.mktemp("gguf-q8")
    tok, write_tok = tokenizer_and_writer()
    stored = write_gguf(model, d / "m.gguf", qtype="Q8_0", tokenizer=write_tok)
    convert(d / "m.gguf", d / "g.colibri", progress=False)
    return d / "m.gguf", stored, d / "g.colibri", model, tok


def test_q8_0_blocks_are_copied_and_decode_as_gguf_does(q8):
    _, stored, path, _, _ = q8
    with cd.open_model(path) as m:
        assert (m.config.scheme, m.dense_scheme, m.lm_head_scheme) == ("q8_0", "q8_0", "q8_0")
        blob, layout = m.read_expert(1, 5), m.expert_layout(1, 5)
        for part in ("gate", "up", "down"):
            ml = getattr(layout, part)
            q = stored[f"blk.1.ffn_{part}_exps.weight"][5]
            assert bytes(np.asarray(blob)[ml.data_offset:ml.data_offset + ml.data_bytes]) == q.tobytes()
            assert np.array_equal(dequantize(blob, ml).view(np.uint32), gguf.quants.dequantize(q, Q8).view(np.uint32))
        for name, key in (("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"),
                          ("model.embed_tokens.weight", "token_embd.weight"), ("lm_head.weight", "output.weight")):
            mblob, ml = m.matrix(name)
            assert block_bytes(mblob, ml)[1].tobytes() == stored[key].tobytes(), name
            assert np.array_equal(dequantize(mblob, ml), gguf.quants.dequantize(stored[key], Q8))


def test_q8_0_logits_equal_transformers_on_the_gguf_values_on_every_level(q8):
    from colibri_dist.native import simd_available
    gguf_path, _, path, model, _ = q8
    ids = np.random.default_rng(5).integers(0, 320, 40)
    got = {level: logits(path, ids, level) for level in simd_available()}
    assert all(np.array_equal(got["scalar"], g) for g in got.values()), list(got)
    ref = reference(dequantized_model(model, gguf_path), ids)
    assert rel_err(got["scalar"], ref) <= 1e-4
    assert rel_err(got["scalar"], reference(model, ids)) > 1e-6        # the file's values, not the float model's


@pytest.fixture(scope="module", params=["MXFP4_MOE", "IQ4_XS", "IQ4_NL", "Q5_0", "Q5_1"])
def blocks(tmp_path_factory, request):
    """A tiny Qwen3-MoE with every quantized matrix in whole 256-element super-blocks, written with IQ4_XS's
    (IQ4_NL's, Q5_0's, Q5_1's) blocks (experts, attention and embedding; Q6_K output, router F32), or MXFP4_MOE's
    (MXFP4 experts,
    Q8_0 elsewhere), and imported: (qtype, stored arrays, container, model). The K-quant mixes:
    test_format_gguf_mix.py."""
    import transformers
    from colibri_dist.format.tiny import _COMMON
    torch.manual_seed(2)
    cfg = transformers.Qwen3MoeConfig(**dict(_COMMON, vocab_size=320, hidden_size=256, intermediate_size=256,
                                             moe_intermediate_size=256, num_experts=4, num_experts_per_tok=2,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                             norm_topk_prob=True, initializer_range=0.05))
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    d = tmp_path_factory.mktemp("gguf-" + request.param)
    stored = write_gguf(model, d / "m.gguf", qtype=request.param)
    convert(d / "m.gguf", d / "g.colibri", progress=False)
    return request.param, stored, d / "g.colibri", model


def test_quantized_blocks_are_copied_and_decode_as_gguf_does(blocks):
    qtype, stored, path, _ = blocks
    kind_of = {key: gguf.GGMLQuantizationType[tensor_type(key, stored[key], qtype)]
               for key in ("blk.1.ffn_gate_exps.weight", "blk.0.attn_output.weight", "output.weight")}
    with cd.open_model(path) as m:
        names = [k.name.lower() for k in kind_of.values()]
        names[2] = {"q6_k": "q6_k_r16"}.get(names[2], names[2])     # a Q6_K head of whole 16-row groups, interleaved
        assert (m.config.scheme, m.dense_scheme, m.lm_head_scheme) == tuple(names)
        blob, layout = m.read_expert(1, 3), m.expert_layout(1, 3)
        experts = kind_of["blk.1.ffn_gate_exps.weight"]
        for part in ("gate", "up", "down"):
            ml = getattr(layout, part)
            q = stored[f"blk.1.ffn_{part}_exps.weight"][3]
            assert bytes(np.asarray(blob)[ml.data_offset:ml.data_offset + ml.data_bytes]) == q.tobytes()
            assert np.array_equal(dequantize(blob, ml).view(np.uint32),
                                  gguf.quants.dequantize(q, experts).view(np.uint32))
        dense = kind_of["blk.0.attn_output.weight"]
        for name, key, kind in (("model.layers.0.self_attn.o_proj.weight", "blk.0.attn_output.weight", dense),
                                ("model.embed_tokens.weight", "token_embd.weight", dense),
                                ("lm_head.weight", "output.weight", kind_of["output.weight"])):
            mblob, ml = m.matrix(name)
            assert block_bytes(mblob, ml)[1].tobytes() == stored[key].tobytes(), name
            assert np.array_equal(dequantize(mblob, ml).view(np.uint32),
                                  gguf.quants.dequantize(stored[key], kind).view(np.uint32)), name


def test_quantized_blocks_logits_equal_transformers_on_the_gguf_values_on_every_level(blocks):
    from colibri_dist.native import simd_available
    qtype, stored, path, model = blocks
    ids = np.random.default_rng(6).integers(0, 320, 40)
    got = {level: logits(path, ids, level) for level in simd_available()}
    assert all(np.array_equal(got["scalar"], g) for g in got.values()), list(got)
    ref = reference(dequantized_model(model, path.parent / "m.gguf"), ids)
    assert rel_err(got["scalar"], ref) <= 1e-4
    assert rel_err(got["scalar"], reference(model, ids)) > 1e-4        # the file's values, not the float model's


def test_tokenizer_and_chat_template_come_from_the_metadata(q8):
    _, _, path, _, tok = q8
    with cd.LLM(path) as llm:
        for text in TEXTS:
            assert llm.tokenizer.encode(text, add_special_tokens=False).ids == \
                tok.encode(text, add_special_tokens=False).ids, text
            assert llm.tokenizer.decode(tok.encode(text).ids, skip_special_tokens=False) == text
        assert llm.eos_token_ids == (2,)
        files = cd.open_model(path).tokenizer_files()
    assert json.loads(files["tokenizer_config.json"])["chat_template"] == TEMPLATE
    assert json.loads(files["tokenizer_config.json"])["eos_token"] == "<|im_end|>"


# ---- bad files: named errors, nothing written ------------------------------------------------------------

def refused(src, tmp_path, match):
    dst = tmp_path / "out.colibri"
    with pytest.raises(FormatError, match=match):
        convert(src, dst, progress=False)
    assert os.listdir(tmp_path) == [os.path.basename(src)]      # no DST, no DST.partial


def test_missing_metadata_is_named(f32, tmp_path):
    model = f32[3]
    write_gguf(model, tmp_path / "m.gguf", drop_keys=("expert_feed_forward_length",))
    refused(tmp_path / "m.gguf", tmp_path, r"m\.gguf: GGUF metadata key 'qwen3moe\.expert_feed_forward_length' "
                                           r"is missing")


def test_unsupported_tensor_type_is_named(f32, tmp_path):
    raw = np.zeros((32, 8 * 18), np.uint8)      # 32 rows of 8 Q4_0 blocks (256 values, 18 bytes a block)
    write_gguf(f32[3], tmp_path / "m.gguf", raw_tensors={"blk.0.attn_v.weight": (raw, "Q4_0")})
    refused(tmp_path / "m.gguf", tmp_path, r"m\.gguf: tensor 'blk\.0\.attn_v\.weight' is Q4_0: not supported")


def test_a_k_quant_tensor_with_cols_not_whole_super_blocks_is_refused(tmp_path):
    """llama.cpp never writes one; gguf's reader refuses it (naming the row size and type), so convert does."""
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "qwen3moe")
    w.add_tensor("blk.0.attn_q.weight", np.zeros(2 * 2 * 144, np.int8), raw_shape=(2, 300),
                 raw_dtype=gguf.GGMLQuantizationType.Q4_K)             # int8 words: the shape is taken as elements
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    refused(tmp_path / "m.gguf", tmp_path, r"m\.gguf: not a readable GGUF file .*row size \(300\) is not a "
                                           r"multiple of Q4_K block size \(256\)")


def test_unknown_tensor_and_architecture_are_named(f32, tmp_path):
    write_gguf(f32[3], tmp_path / "m.gguf", extra_tensors={"blk.0.ffn_gate_inp_shexp.weight": np.ones(32, np.float32)})
    refused(tmp_path / "m.gguf", tmp_path, r"tensor 'blk\.0\.ffn_gate_inp_shexp\.weight' has no place in a qwen3moe")
    os.remove(tmp_path / "m.gguf")
    write_gguf(f32[3], tmp_path / "m.gguf", arch="grok")
    refused(tmp_path / "m.gguf", tmp_path, r"GGUF architecture 'grok' is not supported; supported: deepseek2, "
                                           r"glm4moe, gpt-oss, llama, olmoe, qwen2moe, qwen3moe")


def test_without_the_gguf_package_the_extra_is_named(f32, tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(FormatError, match=r"m\.gguf: reading GGUF files needs the gguf package: "
                                          r"pip install 'colibri-dist\[gguf\]'"):
        convert(f32[1], tmp_path / "out.colibri", progress=False)
    assert os.listdir(tmp_path) == []


def test_llm_imports_a_gguf_once_into_the_cache(f32, tmp_path, monkeypatch, capsys):
    hf_path, gguf_path, _, _ = f32
    monkeypatch.setenv("COLIBRI_CACHE_DIR", str(tmp_path))
    ids = np.arange(12)
    with cd.LLM(str(gguf_path), w8a8=False) as llm:
        first = llm.path
        assert first.startswith(str(tmp_path / "gguf" / "m-")) and first.endswith(".colibri")
        assert np.array_equal(llm.logits(ids), logits(hf_path, ids))
    assert "importing" in capsys.readouterr().err
    mtime = os.stat(first).st_mtime_ns
    with cd.LLM(str(gguf_path), w8a8=False) as llm:
        assert llm.path == first and os.stat(first).st_mtime_ns == mtime     # reused, not imported again
    assert "importing" not in capsys.readouterr().err


def test_a_truncated_file_is_named(f32, tmp_path):
    data = open(f32[1], "rb").read()
    (tmp_path / "m.gguf").write_bytes(data[:len(data) // 2])
    refused(tmp_path / "m.gguf", tmp_path, r"m\.gguf: not a readable GGUF file")


# ---- the other architectures: llama.cpp's olmoe, llama (Mixtral), glm4moe -------------------------------

NEXTN = {"blk.2.nextn.eh_proj.weight": np.ones((32, 64), np.float32), "blk.2.attn_norm.weight": np.ones(32, np.float32),
         "blk.2.nextn.enorm.weight": np.ones(32, np.float32)}


@pytest.mark.parametrize("family", ["olmoe", "mixtral", "glm4_moe", "deepseek_v3", "deepseek_v3/kv_b"])
def test_more_architectures_import_bit_for_bit(tmp_path_factory, family):
    """OLMoE (q/k norms over the whole projection), Mixtral (arch llama, q/k rows permuted for interleaved rope),
    GLM-4.5 (shared experts, correction bias, a dense first layer, partial rotary, routed scaling, its NextN
    layer left out), DeepSeek-V3 (MLA, as newer llama.cpp writes it: attn_k_b/attn_v_b; /kv_b: attn_kv_b as the
    gguf package's TensorNameMap alone maps it): logits equal the safetensors conversion's bit for bit and
    transformers' within 1e-4."""
    from colibri_dist.format.tiny import write_tiny
    family, _, form = family.partition("/")
    d = tmp_path_factory.mktemp(f"gguf-{family}")
    model = write_tiny(family, d / "hf")
    write_gguf(model, d / "m.gguf", extra_tensors=NEXTN if family == "glm4_moe" else None, split_kv_b=form != "kv_b")
    convert(d / "hf", d / "hf.colibri", experts="f32", progress=False)
    convert(d / "m.gguf", d / "g.colibri", progress=False)
    ids = np.random.default_rng(3).integers(0, 64, 40)
    got = logits(d / "g.colibri", ids)
    assert np.array_equal(got, logits(d / "hf.colibri", ids))
    assert rel_err(got, reference(model, ids)) <= 1e-4
    with cd.open_model(d / "g.colibri") as m, cd.open_model(d / "hf.colibri") as h:
        assert m.config == h.config and m.config.scheme == "f32"
        names = m.tensor_names()       # the NextN layer's tensors are not converted; MLA's split form keeps
        split = [n for n in names if re.search(r"\.[kv]_b_proj\.", n)]     # k_b_proj, v_b_proj for kv_b_proj
        assert len(split) == (2 * m.config.n_layers if family == "deepseek_v3" and form != "kv_b" else 0)
        assert len(names) - len(split) // 2 == len(h.tensor_names())
        assert not any(n.startswith("model.layers.2.") for n in m.tensor_names())


def test_mla_split_kv_b_of_a_quantized_file_keeps_its_blocks(tmp_path):
    """A Q8_0 DeepSeek-V3 file (MLA split form): attn_k_b [heads, kv_lora, nope] and attn_v_b [heads, v, kv_lora] are
    the absorbed per-head matrices llama.cpp multiplies; they become k_b_proj / v_b_proj, heads stacked by rows,
    their Q8_0 blocks copied byte for byte (not decoded into an f32 kv_b_proj, as they were: top-1 0.94 against
    llama.cpp on the same file in bench gguf-quality), and read back as gguf.quants.dequantize reads them."""
    import transformers
    from colibri_dist.format.layout import DTYPE_NAMES
    from colibri_dist.format.tiny import tiny_config
    cfg = tiny_config("deepseek_v3")
    for k, v in dict(hidden_size=64, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=32,
                     v_head_dim=64, moe_intermediate_size=32, intermediate_size=64).items():
        setattr(cfg, k, v)
    torch.manual_seed(5)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    stored = write_gguf(model, tmp_path / "m.gguf", qtype="Q8_0")
    convert(tmp_path / "m.gguf", tmp_path / "g.colibri", progress=False)
    with cd.open_model(tmp_path / "g.colibri") as m:
        assert not any("kv_b_proj" in n for n in m.tensor_names())
        for layer in range(cfg.num_hidden_layers):
            for x, rows in (("k", cfg.kv_lora_rank), ("v", cfg.v_head_dim)):
                raw = stored[f"blk.{layer}.attn_{x}_b.weight"]
                blob, ml = m.matrix(f"model.layers.{layer}.self_attn.{x}_b_proj.weight")
                assert DTYPE_NAMES[ml.dtype] == "q8_0" and ml.rows == cfg.num_attention_heads * rows
                data = np.frombuffer(blob, np.uint8)[ml.data_offset:ml.data_offset + ml.data_bytes]
                assert np.array_equal(data, raw.reshape(-1))
                want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0)
                assert np.array_equal(dequantize(blob, ml), want.reshape(ml.rows, ml.cols))
        _, q_b = m.matrix("model.layers.0.self_attn.q_b_proj.weight")
        assert DTYPE_NAMES[q_b.dtype] == "q8_0"


def test_deepseek_v3_with_yarn_rope_imports_bit_for_bit(tmp_path):
    """DeepSeek-V3's yarn rope (rope.scaling.* as convert_hf_to_gguf.py writes it) imported as its rope_parameters."""
    import transformers
    from colibri_dist.format.tiny import tiny_config
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
            "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0}
    torch.manual_seed(4)
    cfg = tiny_config("deepseek_v3")
    cfg.rope_parameters = yarn
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    model.save_pretrained(tmp_path / "hf")
    write_gguf(model, tmp_path / "m.gguf")
    convert(tmp_path / "hf", tmp_path / "hf.colibri", experts="f32", progress=False)
    convert(tmp_path / "m.gguf", tmp_path / "g.colibri", progress=False)
    ids = np.random.default_rng(3).integers(0, 64, 40)
    got = logits(tmp_path / "g.colibri", ids)
    assert np.array_equal(got, logits(tmp_path / "hf.colibri", ids))
    assert rel_err(got, reference(model, ids)) <= 1e-4
    with cd.open_model(tmp_path / "g.colibri") as m:
        assert m.meta["source_config"]["rope_parameters"] == yarn


def test_a_split_kv_b_without_its_v_half_is_named(tmp_path):
    from colibri_dist.format.tiny import tiny_model
    write_gguf(tiny_model("deepseek_v3"), tmp_path / "m.gguf", drop_tensors=("blk.1.attn_v_b.weight",))
    refused(tmp_path / "m.gguf", tmp_path, r"m\.gguf: tensors blk\.1\.attn_k_b\.weight \[4, 16, 8\], "
                                           r"blk\.1\.attn_v_b\.weight \(absent\): not MLA's split kv_b_proj")


def test_a_dense_llama_and_an_unknown_gating_are_named(tmp_path):
    from colibri_dist.format.tiny import tiny_model
    write_gguf(tiny_model("mixtral"), tmp_path / "m.gguf", values={"expert_count": 0})
    refused(tmp_path / "m.gguf", tmp_path, r"m\.gguf: GGUF metadata llama\.expert_count = 0: must be > 0 \(a llama "
                                           r"file without it is a dense model")
    os.remove(tmp_path / "m.gguf")
    write_gguf(tiny_model("glm4_moe"), tmp_path / "m.gguf", extra_tensors=NEXTN,
               values={"expert_gating_func": gguf.ExpertGatingFuncType.SOFTMAX})
    refused(tmp_path / "m.gguf", tmp_path, r"m\.gguf: GGUF metadata glm4moe\.expert_gating_func = 1 is not imported")
    os.remove(tmp_path / "m.gguf")        # deepseek2 without the key: llama.cpp runs DeepSeek-V2's softmax
    write_gguf(tiny_model("deepseek_v3"), tmp_path / "m.gguf", drop_keys=("expert_gating_func",))
    refused(tmp_path / "m.gguf", tmp_path, r"m\.gguf: GGUF metadata key 'deepseek2\.expert_gating_func' is missing")
