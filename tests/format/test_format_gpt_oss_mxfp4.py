"""The hub's gpt-oss checkpoints: experts as MXFP4 gate_up_proj_blocks / _scales and down_proj_blocks / _scales
(uint8, transformers' integrations/mxfp4.py layout), everything else float.

The oracle is transformers loading the same checkpoint itself (Mxfp4Config(dequantize=True) on CPU):
--experts mxfp4 keeps every block exactly (repacked into llama.cpp's nibble order: the container's blocks are
the ones ggml's quantizer made before they were written in the hub's order), and the logits are transformers'
within 1e-4, greedy tokens equal; --experts f32 decodes them to exactly transformers' dequantized weights;
blocks of the wrong dtype are named, nothing written.
"""
import json
import shutil

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import FormatError
from colibri_dist.format.mxfp4 import quantize_mxfp4

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]


def hub_blocks(ggml):
    """llama.cpp's blocks [rows, nb * 17] -> the hub's (blocks [rows, nb, 16], scales [rows, nb]): element 2k
    of a block in the low nibble of byte k, 2k + 1 in the high one."""
    b = ggml.reshape(ggml.shape[0], -1, 17)
    q = np.concatenate([b[..., 1:] & 15, b[..., 1:] >> 4], axis=-1)
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8), b[..., 0].copy()


def write_hub_checkpoint(path):
    """A tiny gpt-oss (whole 32-blocks) saved as the hub saves gpt-oss: MXFP4 experts; -> ggml blocks by name."""
    from safetensors.torch import load_file, save_file
    from colibri_dist.format.tiny import tiny_config
    cfg = tiny_config("gpt_oss")
    cfg.hidden_size, cfg.intermediate_size, cfg.head_dim, cfg.vocab_size, cfg.num_hidden_layers = 64, 32, 16, 97, 3
    cfg.layer_types = ["sliding_attention", "full_attention", "sliding_attention"]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("_bias", ".bias", "sinks")):
                p.copy_((torch.rand(p.shape, generator=gen) - 0.5) * 0.5)
    model.save_pretrained(path)
    tensors, ggml = load_file(str(path / "model.safetensors")), {}
    for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        w = tensors.pop(name).numpy()                                    # [E, in, out]: x @ W
        ggml[name] = [quantize_mxfp4(np.ascontiguousarray(w[e].T)) for e in range(w.shape[0])]
        blocks, scales = zip(*(hub_blocks(g) for g in ggml[name]))
        tensors[name + "_blocks"] = torch.from_numpy(np.stack(blocks))
        tensors[name + "_scales"] = torch.from_numpy(np.stack(scales))
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": NOT_CONVERTED}
    (path / "config.json").write_text(json.dumps(cfg))
    return ggml


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt-oss-hub")
    ggml = write_hub_checkpoint(d / "hf")
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        d / "hf", quantization_config=transformers.Mxfp4Config(dequantize=True), dtype=torch.float32).eval()
    return d, ggml, ref


def test_mxfp4_blocks_are_kept_and_the_logits_are_transformers(hub):
    d, ggml, ref = hub
    cd.convert(d / "hf", d / "m.colibri", experts="mxfp4", dense="f32", progress=False)
    with cd.open_model(d / "m.colibri") as m:
        assert m.config.scheme == "mxfp4"
        for layer in (0, 2):
            gu, dn = (ggml[f"model.layers.{layer}.mlp.experts.{p}"] for p in ("gate_up_proj", "down_proj"))
            for e in (0, 3):
                blob, layout = m.read_expert(layer, e), m.expert_layout(layer, e)
                for part, want in (("gate", gu[e][0::2]), ("up", gu[e][1::2]), ("down", dn[e])):
                    ml = getattr(layout, part)
                    assert bytes(np.asarray(blob)[ml.data_offset:ml.data_offset + ml.data_bytes]) == want.tobytes()
    ids = np.random.default_rng(3).integers(0, 97, 40)
    with cd.LLM(d / "m.colibri", w8a8=False) as llm:
        got = llm.logits(ids)
    with torch.no_grad():
        want = ref(torch.from_numpy(ids)[None]).logits[0].numpy()
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_other_encodings_decode_the_blocks_exactly(hub):
    d, _, ref = hub
    cd.convert(d / "hf", d / "f.colibri", experts="f32", progress=False)
    from colibri_dist.format.quantize import dequantize
    with cd.open_model(d / "f.colibri") as m:
        experts = ref.model.layers[1].mlp.experts
        for e in (1, 2):
            blob, layout = m.read_expert(1, e), m.expert_layout(1, e)
            gu, dn = experts.gate_up_proj[e].detach().numpy(), experts.down_proj[e].detach().numpy()
            assert np.array_equal(dequantize(blob, layout.gate), gu[:, 0::2].T)
            assert np.array_equal(dequantize(blob, layout.up), gu[:, 1::2].T)
            assert np.array_equal(dequantize(blob, layout.down), dn.T)


def test_blocks_of_the_wrong_dtype_are_named(hub, tmp_path):
    from safetensors.torch import load_file, save_file
    d, _, _ = hub
    shutil.copytree(d / "hf", tmp_path / "hf")
    tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
    name = "model.layers.1.mlp.experts.down_proj_scales"
    tensors[name] = tensors[name].to(torch.int16)
    save_file(tensors, str(tmp_path / "hf" / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(FormatError, match=r"down_proj_scales' is I16, expected U8 \(MXFP4 blocks / scales\)"):
        cd.convert(tmp_path / "hf", tmp_path / "m.colibri", experts="mxfp4", progress=False)
    assert not (tmp_path / "m.colibri").exists()
