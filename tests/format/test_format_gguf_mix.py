"""A Q4_K_M / Q5_K_M file mixes types inside a part, and the import keeps every matrix's own, bit for bit.

gguf_tiny writes a tiny Qwen3-MoE with llama-quantize's choice of types (llama_tensor_get_type_impl): Q6_K for the
output, for attn_v and for the expert down projections of the `use_more_bits` layer (layer 1 of 2), Q4_K (Q5_K)
for the rest, router F32. `colibri convert` without a scheme keeps each tensor's encoding: the container's bytes
are the GGUF's for every tensor (a multiplied Q4_K matrix's blocks 8 rows interleaved as q4_k_r8: deinterleaved,
the same bytes), decode == gguf.quants.dequantize, the header says "mixed", `colibri inspect`
counts the matrices of each encoding, the logits are the same bits on every SIMD level and within the oracle
tolerance of transformers on the dequantized GGUF values; the C reader opens the file and gives the engine's
bits. An explicit scheme still re-encodes; a hot-added expert takes its layer's encodings; a table whose experts
of one layer are laid out differently, or whose matrices disagree with a single-scheme header, is refused.
"""
import json

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist import convert
from colibri_dist.cli import main
from colibri_dist.errors import FormatError
from colibri_dist.format import spec
from colibri_dist.format.quantize import block_bytes, dequantize

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
from gguf_tiny import dequantized_model, file_values, write_gguf  # noqa: E402  (needs gguf)
from container_edit import find, fix_crcs, set_entry  # noqa: E402
from test_format_damage import c_open  # noqa: E402

ATTN = {"attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj"}
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight"}
ENCODING = {"Q4_K": "q4_k", "Q5_K": "q5_k", "Q6_K": "q6_k", "Q8_0": "q8_0"}
# a multiplied matrix's encoding: the blocks interleaved by rows (the embedding keeps q4_k / q6_k; kquants_r8.py,
# kquants_r16.py)
MATRIX = {**ENCODING, "Q4_K": "q4_k_r8", "Q6_K": "q6_k_r16"}


def tiny_model(seed=2):
    """A Qwen3-MoE whose every quantized matrix has whole 256-element super-blocks (2 layers, 4 experts)."""
    import transformers
    from colibri_dist.format.tiny import _COMMON
    torch.manual_seed(seed)
    cfg = transformers.Qwen3MoeConfig(**dict(_COMMON, vocab_size=320, hidden_size=256, intermediate_size=256,
                                             moe_intermediate_size=256, num_experts=4, num_experts_per_tok=2,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                             norm_topk_prob=True, initializer_range=0.05))
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()


@pytest.fixture(scope="module", params=["Q4_K_M", "Q5_K_M"])
def mix(tmp_path_factory, request):
    """(qtype, gguf path, container, model) of the tiny model written with the file type's mix and imported."""
    model = tiny_model()
    d = tmp_path_factory.mktemp("gguf-" + request.param)
    write_gguf(model, d / "m.gguf", qtype=request.param)
    convert(d / "m.gguf", d / "g.colibri", progress=False)
    return request.param, d / "m.gguf", d / "g.colibri", model


def kept_matrices(m, gguf_name, n_experts):
    """[(blob, MatrixLayout)] holding GGUF tensor `gguf_name` in container `m` (one per expert of a stack)."""
    if gguf_name in GLOBAL:
        return [m.matrix(GLOBAL[gguf_name])]
    _, layer, kind, _ = gguf_name.split(".")
    if kind.endswith("_exps"):
        part = kind.split("_")[1]
        return [(m.read_expert(int(layer), e), getattr(m.expert_layout(int(layer), e), part))
                for e in range(n_experts)]
    return [m.matrix(f"model.layers.{layer}.self_attn.{ATTN[kind]}.weight")]


def test_the_file_mixes_types_inside_each_part(mix):
    """The fixture is the mix the import must keep: per layer Q4_K (Q5_K) and Q6_K down projections and attn_v."""
    qtype, gguf_path, _, _ = mix
    types = {k: t for k, (_, t) in file_values(gguf_path).items()}
    base = qtype[:4]
    assert types["blk.0.ffn_down_exps.weight"] == types["blk.0.attn_v.weight"] == base
    assert types["blk.1.ffn_down_exps.weight"] == types["blk.1.attn_v.weight"] == "Q6_K"
    assert types["blk.1.ffn_gate_exps.weight"] == types["blk.1.attn_q.weight"] == types["token_embd.weight"] == base
    assert types["output.weight"] == "Q6_K" and types["blk.0.ffn_gate_inp.weight"] == "F32"


def test_every_tensor_is_kept_bit_for_bit_and_decodes_as_gguf_does(mix):
    _, gguf_path, path, _ = mix
    reader = {t.name: t for t in gguf.GGUFReader(str(gguf_path)).tensors}
    kept = 0
    with cd.open_model(path) as m:
        for name, t in reader.items():
            if t.tensor_type.name == "F32":
                continue
            raw = np.asarray(t.data).reshape(-1).view(np.uint8)
            mats = kept_matrices(m, name, m.config.n_experts)
            per = raw.size // len(mats)
            for i, (blob, ml) in enumerate(mats):
                want = raw[i * per:(i + 1) * per]
                table = ENCODING if name == "token_embd.weight" else MATRIX
                assert ml.dtype == spec_code(table[t.tensor_type.name]), name
                blocks, kept_bytes = block_bytes(blob, ml)
                assert blocks == ENCODING[t.tensor_type.name] and kept_bytes.tobytes() == want.tobytes(), name
                oracle = gguf.quants.dequantize(want.reshape(ml.rows, -1), t.tensor_type)
                assert np.array_equal(dequantize(blob, ml).view(np.uint32), oracle.view(np.uint32)), name
                kept += 1
    assert kept == 2 * (3 * 4 + 4) + 2          # 2 layers x (3 stacks x 4 experts + 4 projections) + embd + output


def spec_code(name):
    from colibri_dist.format.layout import SCHEMES
    return SCHEMES[name]


def expected_counts(gguf_path, n_experts):
    """{"experts": {...}, "dense": {...}}: matrices per encoding, from the GGUF's own tensor types."""
    out = {"experts": {}, "dense": {}}
    for name, (_, t) in file_values(gguf_path).items():
        if t == "F32" or name in GLOBAL:
            continue
        part, n = ("experts", n_experts) if "_exps" in name else ("dense", 1)
        out[part][MATRIX[t]] = out[part].get(MATRIX[t], 0) + n
    return out


def test_bytes_per_token_leave_the_encoded_embedding_out(mix):
    """A decode token reads one row of the embedding: the imported token_embd (a k-quant matrix entry) is not
    counted with the dense matrices (it was: the peer bench's imported Q4_K_M column read 306 MB a token beside
    the file's 248 MB)."""
    from colibri_dist.format import spec, token_bytes
    _, _, path, _ = mix
    with cd.open_model(path) as m:
        dense = sum(e.nbytes for e in m.entries if e.kind in (spec.KIND_MATRIX, spec.KIND_DENSE_MLP)
                    and e.name not in ("lm_head.weight", "model.embed_tokens.weight"))
        assert m.matrix_encodings()["embedding"] and token_bytes.ours(m)["dense"] == dense


def test_header_metadata_and_inspect_say_mixed_with_counts(mix, capsys):
    qtype, gguf_path, path, _ = mix
    base, embd = MATRIX[qtype[:4]], ENCODING[qtype[:4]]
    want = expected_counts(gguf_path, 4)
    assert want["experts"] == {base: 20, "q6_k_r16": 4} and want["dense"] == {base: 7, "q6_k_r16": 1}
    with cd.open_model(path) as m:
        enc = m.matrix_encodings()
        assert (m.config.scheme, m.dense_scheme, m.lm_head_scheme) == ("mixed", "mixed", "q6_k_r16")
        assert m.meta["expert_scheme"] == "mixed" and m.header["scheme_code"] == -1
        assert enc["experts"] == want["experts"] and enc["dense"] == want["dense"]
        assert enc["lm_head"] == {"q6_k_r16": 1} and enc["embedding"] == {embd: 1}
        assert m.expert_layout(0).scheme == base and m.expert_layout(1).scheme == "mixed"
        assert m.expert_layout(1).schemes == (base, base, "q6_k_r16")
        assert f"expert:{base}+q6_k_r16" in m.bytes_by_dtype() and f"expert:{base}" in m.bytes_by_dtype()
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"scheme mixed: {base} 20, q6_k_r16 4 matrices" in out
    assert f"dense matrices mixed: {base} 7, q6_k_r16 1 matrices; lm_head q6_k_r16" in out
    assert main(["inspect", "--json", str(path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["scheme"] == "mixed" and info["matrix_encodings"]["experts"] == want["experts"]
    assert len(info["expert_blob_sizes"]) == 2 and sum(info["expert_blob_sizes"].values()) == 8


def test_logits_equal_transformers_on_the_gguf_values_on_every_level(mix):
    from colibri_dist.native import simd_available, simd_force
    _, gguf_path, path, model = mix
    ids = np.random.default_rng(6).integers(0, 320, 40)
    got = {}
    for level in simd_available():
        with simd_force(level), cd.LLM(path, w8a8=False) as llm:
            got[level] = llm.logits(ids)
    assert all(np.array_equal(got["scalar"], g) for g in got.values()), list(got)
    with torch.no_grad():
        ref = dequantized_model(model, gguf_path)(torch.from_numpy(ids)[None]).logits[0].numpy()
        far = model(torch.from_numpy(ids)[None]).logits[0].numpy()
    scale = np.abs(ref).max()
    assert np.abs(got["scalar"] - ref).max() / scale <= 1e-4
    assert np.abs(got["scalar"] - far).max() / np.abs(far).max() > 1e-4     # the file's values, not the model's


def test_the_c_reader_opens_a_mixed_container_and_gives_the_engines_bits(mix):
    from test_format_c_reader import c_moe_forward
    from colibri_dist._native import ffi, lib
    _, _, path, _ = mix
    out = ffi.new("cb_model **")
    assert lib.cb_model_open(str(path).encode(), 1, out) == 0, ffi.string(lib.cb_last_error()).decode()
    try:
        x = np.random.default_rng(4).standard_normal((12, 256)).astype(np.float32)
        for layer in (0, 1):
            with cd.MoeExecutor(path, w8a8=False) as eng:     # c_moe_forward's engine: the exact-weights mode
                want = eng.moe_forward(layer, x)
            assert np.array_equal(c_moe_forward(out[0], layer, x), want)
    finally:
        lib.cb_model_close(out[0])


def test_an_explicit_scheme_re_encodes_its_part(mix, tmp_path):
    qtype, gguf_path, _, _ = mix
    convert(gguf_path, tmp_path / "i8.colibri", experts="int8", progress=False)
    with cd.open_model(tmp_path / "i8.colibri") as m:
        assert m.config.scheme == "int8" and m.matrix_encodings()["experts"] == {"int8": 24}
        assert m.dense_scheme == "mixed" and m.lm_head_scheme == "q6_k_r16"     # the other parts still kept


def test_a_hot_added_expert_takes_its_layers_encodings(mix, tmp_path):
    import shutil
    qtype, _, path, _ = mix
    base = MATRIX[qtype[:4]]
    local = tmp_path / "g.colibri"
    shutil.copy(path, local)
    rng = np.random.default_rng(9)
    w = {"gate": rng.standard_normal((256, 256)).astype(np.float32) * 0.05,
         "up": rng.standard_normal((256, 256)).astype(np.float32) * 0.05,
         "down": rng.standard_normal((256, 256)).astype(np.float32) * 0.05}
    with cd.MoeExecutor(local) as eng:
        e = eng.add_expert(1, w, np.zeros(256, np.float32))
        assert eng.store.source.layout(1, e).schemes == eng.model.expert_layout(1).schemes == (base, base, "q6_k_r16")
        x = np.random.default_rng(1).standard_normal((3, 256)).astype(np.float32)
        assert np.isfinite(eng.moe_forward(1, x)).all()


def test_experts_of_one_layer_laid_out_differently_are_refused(mix, tmp_path):
    """The store reads a layer's experts with one layout: swapping an expert of layer 0 (all q4_k) with one of
    layer 1 (q6_k_r16 down) keeps every entry valid on its own, and is refused by name."""
    _, _, path, _ = mix
    raw = bytearray(open(path, "rb").read())
    a = find(raw, lambda e: e.kind == spec.KIND_EXPERT and e.layer == 0 and e.expert == 2)
    b = find(raw, lambda e: e.kind == spec.KIND_EXPERT and e.layer == 1 and e.expert == 2)
    set_entry(raw, a, "layer", 1)
    set_entry(raw, b, "layer", 0)
    bad = tmp_path / "swap.colibri"
    bad.write_bytes(bytes(fix_crcs(raw)))
    with pytest.raises(FormatError, match=r"swap\.colibri: layer 0 expert 2 \(.*q6_k.*\) is laid out unlike "
                                          r"expert 0 of its layer"):
        cd.open_model(bad)


def test_a_single_scheme_header_over_mixed_matrices_is_refused_by_both_readers(mix, tmp_path):
    import struct
    qtype, _, path, _ = mix
    raw = bytearray(open(path, "rb").read())
    base = MATRIX[qtype[:4]]
    struct.pack_into("16si", raw, 104, base.encode(), spec_code(base))
    bad = tmp_path / "one.colibri"
    bad.write_bytes(bytes(fix_crcs(raw)))
    with pytest.raises(FormatError, match=rf"one\.colibri: layer 1 expert 0: down is q6_k_r16 \[256,256\], "
                                          rf"expected {base} \[256,256\]"):
        cd.open_model(bad)
    status, msg = c_open(bad)
    assert status == 4 and "layer 1 expert 0" in msg
