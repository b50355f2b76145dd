"""`colibri convert --experts mxfp4 | iq4_xs | iq4_nl` on a Hugging Face checkpoint whose sizes are whole blocks:
the experts are written in llama.cpp's blocks by colibri's reference quantizers (gguf.quants.dequantize reads
them: the values the container decodes to), the logits are the same bits on every SIMD level and equal
transformers' with the experts replaced by those values; a checkpoint whose sizes are not whole blocks is refused
naming the matrix and the multiple, nothing written."""
import os

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.cli import main
from colibri_dist.format.quantize import dequantize, quantize_matrix

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
SCHEMES = ["mxfp4", "iq4_xs", "iq4_nl"]
QTYPE = {"mxfp4": "MXFP4", "iq4_xs": "IQ4_XS", "iq4_nl": "IQ4_NL"}
QK = {"mxfp4": 32, "iq4_xs": 256, "iq4_nl": 32}


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A tiny Qwen3-MoE checkpoint with hidden and expert sizes of 256 (whole blocks of every encoding)."""
    import transformers
    from colibri_dist.format.tiny import _COMMON
    torch.manual_seed(4)
    cfg = transformers.Qwen3MoeConfig(**dict(_COMMON, vocab_size=320, hidden_size=256, intermediate_size=256,
                                             moe_intermediate_size=256, num_experts=4, num_experts_per_tok=2,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                             norm_topk_prob=True, initializer_range=0.05))
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    d = tmp_path_factory.mktemp("lut-hf")
    model.save_pretrained(d / "hf")
    return d / "hf", model


def with_decoded_experts(model, m):
    """A copy of `model` whose expert weights are the container's decoded values."""
    import copy
    out = copy.deepcopy(model)
    with torch.no_grad():
        for li, layer in enumerate(out.model.layers):
            ex = layer.mlp.experts
            for e in range(ex.gate_up_proj.shape[0]):
                blob, lay = m.read_expert(li, e), m.expert_layout(li, e)
                gate, up, down = (dequantize(blob, getattr(lay, p)) for p in ("gate", "up", "down"))
                ex.gate_up_proj[e] = torch.from_numpy(np.concatenate([gate, up], axis=0))
                ex.down_proj[e] = torch.from_numpy(down)
    return out


@pytest.mark.parametrize("scheme", SCHEMES)
def test_convert_experts_writes_llama_cpp_blocks(hf_dir, tmp_path, scheme):
    from colibri_dist.native import simd_available, simd_force
    src, model = hf_dir
    dst = tmp_path / "m.colibri"
    assert main(["convert", str(src), str(dst), "--experts", scheme, "--dense", "f32", "--no-progress"]) == 0
    gate = model.model.layers[1].mlp.experts.gate_up_proj[2, :256].detach().numpy()
    with cd.open_model(dst) as m:
        assert m.config.scheme == scheme
        blob, ml = m.read_expert(1, 2), m.expert_layout(1, 2).gate
        raw = np.asarray(blob)[ml.data_offset:ml.data_offset + ml.data_bytes].reshape(256, -1)
        assert np.array_equal(raw, quantize_matrix(gate, scheme)[0])            # colibri's reference quantizer
        want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[QTYPE[scheme]])
        assert np.array_equal(dequantize(blob, ml).view(np.uint32), want.view(np.uint32))
        ref_model = with_decoded_experts(model, m)
    ids = np.random.default_rng(8).integers(0, 320, 30)
    got = {}
    for level in simd_available():
        with simd_force(level), cd.LLM(dst, w8a8=False) as llm:
            got[level] = llm.logits(ids)
    assert all(np.array_equal(got["scalar"], g) for g in got.values()), list(got)
    with torch.no_grad():
        ref = ref_model(torch.from_numpy(ids)[None]).logits[0].numpy()
        floats = model(torch.from_numpy(ids)[None]).logits[0].numpy()
    assert np.abs(got["scalar"] - ref).max() <= 1e-4 * np.abs(ref).max()
    assert np.abs(got["scalar"] - floats).max() > 1e-3 * np.abs(floats).max()   # the blocks' values, not the floats


@pytest.mark.parametrize("scheme", SCHEMES)
def test_sizes_not_whole_blocks_are_refused(tmp_path, capsys, scheme):
    from colibri_dist.format.tiny import write_tiny
    write_tiny("qwen3_moe", tmp_path / "hf")                 # hidden 32, moe_intermediate_size 16
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "m.colibri"), "--experts", scheme,
                 "--no-progress"]) != 0
    first = "down" if scheme != "iq4_xs" else "gate"         # the first matrix whose cols are not whole blocks
    assert f"expert matrix '{first}': {scheme} needs cols a multiple of {QK[scheme]}" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["hf"]
