"""Weight bytes one decode token reads: of a .colibri container, and of llama.cpp's GGUF of the same model.

Role in the data flow: `colibri convert` prints both after writing (so a preset can be checked against
the llama.cpp file type it stands beside), the whole-model and peer benchmarks divide them by the time of
a decode step to compare with the read bandwidth. A decode token reads every dense matrix (attention
projections, dense MLP layers, the LM head), each MoE layer's router, shared expert and top_k of its
experts; the embedding is one gathered row and is not counted.

llama_cpp_estimate applies llama.cpp's type choice (src/llama-quant.cpp, llama_tensor_get_type_impl of
llama-cpp-python 0.3.36's vendored tree) to the container's shapes for Q8_0, Q4_0 and Q4_K_M:
the output matrix in Q6_K (Q8_0 for Q8_0), the value projection and every FFN down projection of the
`use_more_bits` layers in Q6_K for Q4_K_M, the 8-expert rules (attn_k and attn_v Q8_0, attn_output Q5_K),
the fallback of K-quants for rows not a multiple of 256; routers stay f32. The peer benchmark reads
the real GGUF's tensor types as well (bench/peer_gguf.py) and reports both.
"""
import re

from . import spec

# bytes per block, weights per block (ggml-common.h)
GGML_TYPES = {"F32": (4, 1), "F16": (2, 1), "Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32),
              "Q5_1": (24, 32), "Q8_0": (34, 32), "Q4_K": (144, 256), "Q5_K": (176, 256), "Q6_K": (210, 256)}
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
FTYPES = {"Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q4_K_M": "Q4_K"}     # file type -> its default tensor type
EMBEDDING = "model.embed_tokens.weight"
_ATTN = re.compile(r"^model\.layers\.(\d+)\.self_attn\.(\w+)_proj\.weight$")


def ggml_bytes(type_name, rows, cols):
    """Bytes of a [rows, cols] tensor in a ggml type; the K-quant fallback when cols does not fill blocks."""
    block_bytes, n = GGML_TYPES[type_name]
    if cols % n:
        type_name = FALLBACK.get(type_name, "F16")
        block_bytes, n = GGML_TYPES[type_name]
        if cols % n:
            block_bytes, n = GGML_TYPES["F16"]
    return rows * (cols // n) * block_bytes


def _use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def ours(model):
    """{"dense", "lm_head", "experts", "routers", "total"}: bytes a decode token reads from this container."""
    out = {"dense": 0, "lm_head": 0, "experts": 0, "routers": 0}
    for e in model.entries:
        if e.name == EMBEDDING:                 # an encoded embedding (a GGUF import's token_embd): one row read
            continue
        if e.kind in (spec.KIND_MATRIX, spec.KIND_DENSE_MLP):
            out["lm_head" if e.name == "lm_head.weight" else "dense"] += e.nbytes
        elif e.kind == spec.KIND_SHARED:
            out["experts"] += e.nbytes
        elif e.kind == spec.KIND_ROUTER:
            out["routers"] += e.nbytes
    for layer in model.moe_layers:
        out["experts"] += model.config.top_k * model.expert_layout(layer).nbytes
    out["total"] = sum(out.values())
    return out


def _attn_part(name):
    """"q" | "k" | "v" | "o" | ... for an attention projection's name, else ""."""
    m = _ATTN.match(name)
    return m.group(2) if m else ""


def _down_tensors(model):
    """Layers of llama.cpp's FFN_DOWN tensors in file order: a dense MLP's, or an MoE layer's experts + shared."""
    moe, shared = set(model.moe_layers), model.config.shared_inter > 0
    layers = []
    for layer in range(model.config.n_layers):
        layers += [layer, layer] if layer in moe and shared else [layer]
    return layers


def llama_cpp_estimate(model, ftype):
    """Bytes a decode token reads from llama.cpp's `ftype` GGUF ("Q8_0" | "Q4_0" | "Q4_K_M") of this model."""
    if ftype not in FTYPES:
        raise ValueError(f"no llama.cpp rules for {ftype!r}; known: {', '.join(FTYPES)}")
    base, k_m, e8 = FTYPES[ftype], ftype == "Q4_K_M", model.config.n_experts == 8
    n_down = len(_down_tensors(model))
    n_v = sum(1 for e in model.entries if _attn_part(e.name) == "v")
    out = {"dense": 0, "lm_head": 0, "experts": 0, "routers": 0}
    i_v = 0
    for e in model.entries:
        if e.kind == spec.KIND_MATRIX:
            m = e.matrices[0]
            if e.name == "lm_head.weight":
                out["lm_head"] += ggml_bytes("Q8_0" if base == "Q8_0" else "Q6_K", m.rows, m.cols)
                continue
            t, part = base, _attn_part(e.name)
            if part == "v":
                t = "Q8_0" if e8 else ("Q6_K" if k_m and _use_more_bits(i_v, n_v) else base)
                i_v += 1
            elif part == "k" and e8:
                t = "Q8_0"
            elif part == "o" and e8 and k_m:
                t = "Q5_K"
            out["dense"] += ggml_bytes(t, m.rows, m.cols)
        elif e.kind == spec.KIND_DENSE_MLP:
            out["dense"] += _ffn_bytes(e.matrices, base, k_m and _use_more_bits(e.layer, n_down))
        elif e.kind == spec.KIND_SHARED:
            out["experts"] += _ffn_bytes(e.matrices, base, k_m and _use_more_bits(e.layer, n_down))
        elif e.kind == spec.KIND_ROUTER:
            out["routers"] += e.nbytes
    for layer in model.moe_layers:
        lay = model.expert_layout(layer)
        out["experts"] += model.config.top_k * _ffn_bytes((lay.gate, lay.up, lay.down), base,
                                                          k_m and _use_more_bits(layer, n_down))
    out["total"] = sum(out.values())
    return out


def _ffn_bytes(mats, base, more_bits):
    gate, up, down = mats
    return ggml_bytes(base, gate.rows, gate.cols) + ggml_bytes(base, up.rows, up.cols) + \
        ggml_bytes("Q6_K" if more_bits else base, down.rows, down.cols)
