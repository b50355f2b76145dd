"""DeepSeek-V3's MLA on an imported quantized GGUF file multiplies as llama.cpp does.

llama.cpp's deepseek2 graph runs the absorbed form: q_nope of each (token, head) times attn_k_b, and the latent
attention output of each (token, head) times attn_v_b, as `mul_mat`s on the file's blocks, so its activations are
rounded to the weights' vec_dot type (Q8_0 for Q8_0). The imported model's per-head matrices are those blocks
(k_b_proj / v_b_proj row ranges) and, with the w8a8 switch on (the default), each head's product equals the numpy
model of ggml's Q8_0 x Q8_0 arithmetic (tests/native/q80_ref.py) bit for bit; with it off (--weights-only) the
product is the exact f32 one of gguf.quants.dequantize's weights, the bits of an f32 matrix of those values.
"""
import os
import sys

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist import convert
from colibri_dist.format.layout import SCHEMES
from colibri_dist.native import matrix_from_array, simd_force

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
from gguf_tiny import write_gguf  # noqa: E402  (needs gguf)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "native"))
from native_helpers import AVAILABLE_LEVELS  # noqa: E402
from q80_ref import q80_matmul  # noqa: E402

DIMS = dict(hidden_size=64, q_lora_rank=32, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=32,
            v_head_dim=96, moe_intermediate_size=32, intermediate_size=64)


@pytest.fixture(scope="module")
def q8_file(tmp_path_factory):
    """(imported container, {GGUF name: stored Q8_0 blocks}, config, the file) of a tiny DeepSeek-V3 Q8_0 file."""
    import transformers
    from colibri_dist.format.tiny import tiny_config
    d = tmp_path_factory.mktemp("gguf-mla")
    cfg = tiny_config("deepseek_v3")
    for k, v in DIMS.items():
        setattr(cfg, k, v)
    torch.manual_seed(6)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    stored = write_gguf(model, d / "m.gguf", qtype="Q8_0")
    convert(d / "m.gguf", d / "g.colibri", progress=False)
    return d / "g.colibri", stored, cfg, d / "m.gguf"


def per_head(stored, layer, part, heads, rows, cols):
    raw = stored[f"blk.{layer}.attn_{part}_b.weight"].reshape(heads * rows, -1)
    return [raw[h * rows:(h + 1) * rows] for h in range(heads)], rows, cols


@pytest.mark.parametrize("w8a8", [True, False])
def test_the_models_per_head_products_are_llama_cpps(q8_file, w8a8):
    path, stored, c, _ = q8_file
    H = c.num_attention_heads
    rng = np.random.default_rng(1)
    with cd.LLM(path, w8a8=w8a8) as llm:
        rt = llm.executor.runtime
        for layer, lw in enumerate(llm.weights.layers):
            for views, (raws, rows, cols) in (
                    (lw.mla_kb_t, per_head(stored, layer, "k", H, c.kv_lora_rank, c.qk_nope_head_dim)),
                    (lw.mla_vb, per_head(stored, layer, "v", H, c.v_head_dim, c.kv_lora_rank))):
                assert [(v.dtype, v.rows, v.cols) for v in views] == [(SCHEMES["q8_0"], rows, cols)] * H
                x = rng.standard_normal((9, H, cols + 16)).astype(np.float32)   # the head's input at offset 0
                if w8a8:
                    want = np.stack([q80_matmul(x[:, h, :cols], raws[h], rows, cols) for h in range(H)], axis=1)
                else:
                    f32 = [matrix_from_array(gguf.quants.dequantize(r, gguf.GGMLQuantizationType.Q8_0)) for r in raws]
                    want = rt.matmul_heads(x, f32, H, cols)
                for level in AVAILABLE_LEVELS:
                    with simd_force(level):
                        got = rt.matmul_heads(x, views, H, cols)
                    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (layer, level)


def test_bench_bits_per_weight_of_the_imported_file_are_the_files(q8_file):
    """bench gguf-quality's accounting: the imported container's matrices (attention with k_b_proj / v_b_proj, LM
    head, dense MLP, shared and routed experts) hold the file's Q8_0 bytes, so its bits per weight are the file's
    over the same tensors (15.53 here with the f32 kv_b_proj the split form used to become)."""
    from colibri_dist.bench.format.gguf_quality_ours import bits_per_weight, gguf_bits
    path, _, _, file = q8_file
    with cd.open_model(path) as m:
        assert bits_per_weight(m) == gguf_bits(file) == 8.5


def test_split_matrices_that_disagree_with_the_metadata_are_named(tmp_path):
    """value_length_mla says 12 while attn_v_b holds heads of 8 rows: the model names v_b_proj and both shapes."""
    from colibri_dist.errors import FormatError
    from colibri_dist.format.tiny import tiny_model
    write_gguf(tiny_model("deepseek_v3"), tmp_path / "m.gguf", values={"attention.value_length_mla": 12})
    convert(tmp_path / "m.gguf", tmp_path / "g.colibri", progress=False)
    with pytest.raises(FormatError, match=r"g\.colibri: model\.layers\.0\.self_attn\.v_b_proj\.weight has shape "
                                          r"\[32, 16\], expected \[48, 16\] \(4 heads of \[12, 16\]\)"):
        cd.LLM(tmp_path / "g.colibri")
