"""gpt-oss with MXFP4 experts (the hub's own expert encoding; llama.cpp's block_mxfp4 as colibri's `mxfp4`).

A tiny gpt-oss whose expert matrices are whole 32-blocks (hidden 64, inter 32) converted with --experts mxfp4:
the experts are stored as mxfp4 with their float32 biases beside them, the logits equal transformers' on the
mxfp4-decoded experts within 1e-4 (exact-weights mode), greedy tokens follow, and every SIMD level gives the
same bits (w8a8 default mode).
"""
import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist import native

torch = pytest.importorskip("torch")


def _model(path):
    from model_cases import make_model
    model = make_model("gpt_oss", hidden_size=64, intermediate_size=32)     # whole 32-blocks in every row
    model.save_pretrained(path)
    return model


def _decoded_experts(hf):
    """hf with each expert matrix replaced by its mxfp4-decoded values (colibri's rows: gate_up^T, down^T)."""
    import copy
    from colibri_dist.format.quantize import dequantize, pack_matrix
    q = copy.deepcopy(hf)
    with torch.no_grad():
        for layer in q.model.layers:
            for p in (layer.mlp.experts.gate_up_proj, layer.mlp.experts.down_proj):
                for m in p:
                    blob, layout = pack_matrix(np.ascontiguousarray(m.T.numpy()), "mxfp4")
                    m.copy_(torch.from_numpy(dequantize(blob, layout)).T)
    return q


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt-oss-mxfp4")
    hf = _model(d / "hf")
    cd.convert(d / "hf", d / "m.colibri", experts="mxfp4", dense="f32", progress=False)
    return d / "m.colibri", hf


def test_experts_are_mxfp4_with_their_biases(converted):
    path, _ = converted
    with cd.open_model(path) as m:
        layout = m.expert_layout(0, 1)
        assert m.config.scheme == "mxfp4" and layout.scheme == "mxfp4"
        assert layout.biases is not None and layout.act.kind == "swiglu_oai"


def test_logits_and_greedy_match_transformers_on_the_decoded_experts(converted):
    path, hf = converted
    ref_model = _decoded_experts(hf)
    ids = np.random.default_rng(3).integers(0, 97, 40)
    with cd.LLM(path, w8a8=False) as llm:
        got = llm.logits(ids)
        seq = llm.new_sequence()
        last = llm.forward([(seq, list(ids), False)])[0][-1]
        tokens = []
        for _ in range(8):
            tokens.append(int(np.argmax(last)))
            last = llm.forward([(seq, [tokens[-1]], False)])[0][-1]
        llm.release(seq)
    with torch.no_grad():
        ref = ref_model(torch.from_numpy(ids)[None]).logits[0].numpy()
        x = torch.from_numpy(ids)[None]
        gen = ref_model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=8,
                                 min_new_tokens=8)[0, 40:].tolist()
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    assert tokens == gen


@pytest.mark.parametrize("level", list(native.simd_levels()))
def test_every_simd_level_gives_the_same_bits(converted, level):
    missing = native.simd_levels()[level]
    if missing:
        pytest.skip(f"SIMD level {level} not on this CPU (missing {missing})")
    path, _ = converted
    ids = np.random.default_rng(4).integers(0, 97, 23).tolist()
    with cd.LLM(path) as llm:
        with native.simd_force("scalar"):
            want = llm.logits(ids)
        with native.simd_force(level):
            assert np.array_equal(llm.logits(ids), want)
