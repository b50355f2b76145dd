"""GGUF import of gpt-oss (llama.cpp's architecture `gpt-oss`), a tiny model written as convert_hf_to_gguf.py's
GptOssModel writes float experts: the gate/up/down stacks and their bias stacks, attn_sinks, post_attention_norm,
the router's ffn_gate_inp weight and bias, q/k/v/o biases, the sliding window and yarn keys.

The imported container's logits equal the safetensors conversion's bit for bit and transformers' within 1e-4
when the model's yarn rounds its correction range (truncate true: what llama.cpp's yarn always does, so an
imported file carries no truncate key); the config values llama.cpp's graph fixes (swiglu alpha 1.702, limit
7.0, biased attention, every other layer sliding) are the imported ones; a bias stack of the wrong shape is
named, nothing written. A Q8_0 file and an MXFP4_MOE one (llama-quantize's mix for gpt-oss: MXFP4 expert stacks,
Q8_0 elsewhere; biases F32, as llama.cpp keeps every non-weight tensor) keep the experts' blocks and their
biases and give transformers' logits on the file's values on every SIMD level. With llama.cpp's
source tree present (COLIBRI_LLAMA_CPP, else shared/peers' copy; skipped
otherwise), a file made by its own convert_hf_to_gguf.py imports bit for bit as well.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist import convert
from colibri_dist.errors import FormatError

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
from gguf_tiny import gpt_oss_tensors, tensor_type, write_gguf  # noqa: E402  (needs gguf)
from test_format_gguf import logits, reference, rel_err  # noqa: E402

LLAMA_CPP = os.environ.get("COLIBRI_LLAMA_CPP", "/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp")
YARN = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "truncate": True, "original_max_position_embeddings": 4096}


def tiny_gpt_oss(path, seed=0, **changes):
    """The family's tiny gpt-oss with llama.cpp's fixed values (limit 7.0) and a rounding yarn, saved."""
    import transformers
    from colibri_dist.format.tiny import tiny_config
    cfg = tiny_config("gpt_oss")
    cfg.swiglu_limit, cfg.rope_parameters = 7.0, dict(YARN)
    for k, v in changes.items():
        setattr(cfg, k, v)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("_bias", ".bias", "sinks")):
                p.copy_((torch.rand(p.shape, generator=gen) - 0.5) * 0.5)
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf-gpt-oss")
    model = tiny_gpt_oss(d / "hf")
    stored = write_gguf(model, d / "m.gguf")
    convert(d / "hf", d / "hf.colibri", experts="f32", progress=False)
    convert(d / "m.gguf", d / "g.colibri", progress=False)
    return d, model, stored


def test_gpt_oss_imports_bit_for_bit(imported):
    d, model, stored = imported
    assert {"blk.0.attn_sinks.weight", "blk.1.ffn_gate_exps.bias", "blk.1.ffn_down_exps.bias",
            "blk.0.post_attention_norm.weight", "blk.0.ffn_gate_inp.bias", "blk.0.attn_output.bias"} <= set(stored)
    ids = np.random.default_rng(3).integers(0, 64, 40)
    got = logits(d / "g.colibri", ids)
    assert np.array_equal(got, logits(d / "hf.colibri", ids))
    assert rel_err(got, reference(model, ids)) <= 1e-4
    with cd.open_model(d / "g.colibri") as m, cd.open_model(d / "hf.colibri") as h:
        assert m.config == h.config and m.config.act == h.config.act and m.config.act.limit == 7.0
        hf = m.meta["source_config"]
        assert "truncate" not in hf["rope_parameters"] and hf["rope_parameters"]["factor"] == 32.0
        assert (hf["swiglu_alpha"], hf["swiglu_limit"], hf["attention_bias"], hf["sliding_window"]) == \
            (1.702, 7.0, True, model.config.sliding_window)
        for e in (0, 5):
            for a, b in zip(m.expert_layout(1, e).biases, h.expert_layout(1, e).biases):
                assert a == b
            assert np.array_equal(m.read_expert(1, e), h.read_expert(1, e))


def test_a_bias_stack_of_the_wrong_shape_is_named(imported, tmp_path):
    _, model, _ = imported
    bad = {"blk.1.ffn_up_exps.bias": np.zeros((8, 15), np.float32)}
    write_gguf(model, tmp_path / "m.gguf", raw_tensors={k: (v.view(np.uint8), "F32") for k, v in bad.items()})
    with pytest.raises(FormatError, match=r"up_proj\.bias' has shape \[\d+\], expected \[16\]"):
        convert(tmp_path / "m.gguf", tmp_path / "g.colibri", progress=False)
    assert not (tmp_path / "g.colibri").exists()


def _tokenizer(path):
    """A byte-level BPE of 40 tokens (convert_hf_to_gguf.py needs a tokenizer within the model's vocabulary)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["hello world the quick brown fox"],
                            trainer=trainers.BpeTrainer(vocab_size=40, special_tokens=["<|endoftext|>"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(path)


def test_llama_cpps_own_converter_output_imports_bit_for_bit(tmp_path):
    script = os.path.join(LLAMA_CPP, "convert_hf_to_gguf.py")
    if not os.path.exists(script):
        pytest.skip(f"llama.cpp's convert_hf_to_gguf.py is not at {LLAMA_CPP} (set COLIBRI_LLAMA_CPP)")
    model = tiny_gpt_oss(tmp_path / "hf", seed=2)
    _tokenizer(tmp_path / "hf")
    run = subprocess.run([sys.executable, script, str(tmp_path / "hf"), "--outfile", str(tmp_path / "m.gguf"),
                          "--outtype", "f32"], capture_output=True, text=True, cwd=LLAMA_CPP, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    convert(tmp_path / "m.gguf", tmp_path / "g.colibri", progress=False)
    convert(tmp_path / "hf", tmp_path / "hf.colibri", experts="f32", progress=False)
    ids = np.random.default_rng(5).integers(0, 40, 30)
    got = logits(tmp_path / "g.colibri", ids)
    assert np.array_equal(got, logits(tmp_path / "hf.colibri", ids))
    assert rel_err(got, reference(model, ids)) <= 1e-4


def _gguf_values_model(model, stored, qtype):
    """model with every tensor replaced by the values the GGUF stores (blocks decoded by gguf.quants), the
    gate/up stacks interleaved back into gate_up_proj [E, H, 2I]."""
    import copy
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT_OSS, model.config.num_hidden_layers)
    values = {}
    for hf_name, v in gpt_oss_tensors(model).items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        kind = gguf.GGMLQuantizationType[tensor_type(name, v, qtype)]
        values[hf_name] = gguf.quants.dequantize(stored[name], kind) if stored[name].dtype == np.uint8 \
            else stored[name]
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, t in out.state_dict().items():
            base = name.rsplit(".", 1)[0] + "."
            if name.endswith(("gate_up_proj", "gate_up_proj_bias")):
                kind = "bias" if name.endswith("_bias") else "weight"
                g, u = values[f"{base}gate_proj.{kind}"], values[f"{base}up_proj.{kind}"]
                v = np.stack([g, u], axis=2).reshape(g.shape[0], 2 * g.shape[1], *g.shape[2:])   # rows g0 u0 g1 ..
                v = v.transpose(0, 2, 1) if kind == "weight" else v
            elif name.endswith(("down_proj", "down_proj_bias")):
                kind = "bias" if name.endswith("_bias") else "weight"
                v = values[f"{base}down_proj.{kind}"]
                v = v.transpose(0, 2, 1) if kind == "weight" else v
            else:
                v = values[name + ".weight" if name.endswith("sinks") else name]
            t.copy_(torch.from_numpy(np.ascontiguousarray(v, np.float32)))
    return out


@pytest.mark.parametrize("qtype,experts", [("Q8_0", "q8_0"), ("MXFP4_MOE", "mxfp4")])
def test_a_quantized_file_keeps_its_blocks_and_biases_on_every_level(tmp_path, qtype, experts):
    from colibri_dist.format.quantize import dequantize, expert_biases
    from colibri_dist.native import simd_available
    model = tiny_gpt_oss(tmp_path / "hf", seed=3, hidden_size=64, intermediate_size=32, num_attention_heads=4,
                         head_dim=16, vocab_size=96)
    stored = write_gguf(model, tmp_path / "m.gguf", qtype=qtype)
    convert(tmp_path / "m.gguf", tmp_path / "g.colibri", progress=False)
    with cd.open_model(tmp_path / "g.colibri") as m:
        assert (m.config.scheme, m.dense_scheme) == (experts, "q8_0")
        blob, layout = m.read_expert(1, 2), m.expert_layout(1, 2)
        q = stored["blk.1.ffn_up_exps.weight"][2]
        assert bytes(np.asarray(blob)[layout.up.data_offset:layout.up.data_offset + layout.up.data_bytes]) == \
            q.tobytes()
        kind = gguf.GGMLQuantizationType[experts.upper()]
        assert np.array_equal(dequantize(blob, layout.up), gguf.quants.dequantize(q, kind))
        for got, key in zip(expert_biases(blob, layout), ("gate", "up", "down")):
            assert np.array_equal(got, stored[f"blk.1.ffn_{key}_exps.bias"][2])
    ids = np.random.default_rng(6).integers(0, 96, 40)
    got = {level: logits(tmp_path / "g.colibri", ids, level) for level in simd_available()}
    assert all(np.array_equal(got["scalar"], g) for g in got.values()), list(got)
    assert rel_err(got["scalar"], reference(_gguf_values_model(model, stored, qtype), ids)) <= 1e-4
    assert rel_err(got["scalar"], reference(model, ids)) > 1e-6        # the file's values, not the float model's
