"""The colibri side of `bench gguf-quality`: each mode's container, its bits per weight, its scores on a text.

Role: MODES is the table of what is scored (a row = a mode): a container converted from the Hugging Face
checkpoint with an (experts, dense, lm_head) choice, or llama.cpp's own GGUF file of a type imported, and the
LLM switch it runs with (w8a8: int8 x int8 / int4 x int8 / k-quants x Q8_K; off: exact weights). container()
makes one once per work folder; bits_per_weight() counts every stored matrix but the embedding (experts, shared
experts, attention and dense MLP matrices, LM head: bytes with their scales / weights), as gguf_bits() counts a
GGUF's 2-D tensors but token_embd and the routers; score() runs the text's chunks through LLM.logits and scores
them against saved log-probs (testing/llama_cpp.compare: llama.cpp's statistics). reference() makes saved
log-probs from the transformers model when there is no llama.cpp build (the CI path).
"""
import os

import numpy as np

# mode: (source: "hf" or the imported GGUF type, (experts, dense, lm_head) for "hf", LLM keyword arguments)
MODES = {
    "int8": ("hf", ("int8", "int8", "int8"), {"w8a8": False}),
    "int8 + w8a8": ("hf", ("int8", "int8", "int8"), {"w8a8": True}),
    "int4-g64 (int8 dense)": ("hf", ("int4-g64", "int8", "int8"), {"w8a8": False}),
    "int4-g64 (int8 dense) + w4a8": ("hf", ("int4-g64", "int8", "int8"), {"w8a8": True}),
    "q4_k_m preset": ("hf", ("int4-g64", "int4-g64", "int6-g64"), {"w8a8": False}),
    "q4_k_m preset + w4a8": ("hf", ("int4-g64", "int4-g64", "int6-g64"), {"w8a8": True}),
    "q4_k blocks (head q6_k) + Q8_K": ("hf", ("q4_k", "q4_k", "q6_k"), {"w8a8": True}),
    "imported Q4_K_M": ("Q4_K_M", None, {"w8a8": True}),
    "imported Q4_K_M (exact weights)": ("Q4_K_M", None, {"w8a8": False}),
    "imported Q8_0": ("Q8_0", None, {"w8a8": True}),
}
FOUR_BIT = ("int4-g64 (int8 dense)", "int4-g64 (int8 dense) + w4a8", "q4_k_m preset", "q4_k_m preset + w4a8",
            "q4_k blocks (head q6_k) + Q8_K", "imported Q4_K_M", "imported Q4_K_M (exact weights)")
EMBEDDING = "model.embed_tokens.weight"


def container(mode, hf_dir, ggufs, work):
    """Path of the mode's container in `work` (made once); ggufs: {type: llama.cpp's file}."""
    from ...format.convert import convert
    source, schemes, _ = MODES[mode]
    name = "imported-" + source if source != "hf" else "-".join(schemes)
    path = os.path.join(work, name + ".colibri")
    if not os.path.exists(path):
        if source == "hf":
            convert(hf_dir, path, experts=schemes[0], dense=schemes[1], lm_head=schemes[2], progress=False)
        else:
            convert(ggufs[source], path, progress=False)
    return path


def bits_per_weight(model):
    """Stored bits / weights over every matrix of the container but the embedding (and the routers)."""
    from ...format import spec
    nbytes = weights = 0
    for e in model.entries:
        if e.kind in (spec.KIND_MATRIX, spec.KIND_DENSE_MLP, spec.KIND_SHARED) and e.name != EMBEDDING:
            mats = e.matrices[:1] if e.kind == spec.KIND_MATRIX else e.matrices
            nbytes, weights = nbytes + e.nbytes, weights + sum(m.rows * m.cols for m in mats)
    n = model.config.n_experts
    for layer in model.moe_layers:
        lay = model.expert_layout(layer)
        nbytes += n * lay.nbytes
        weights += n * sum(m.rows * m.cols for m in (lay.gate, lay.up, lay.down))
    return 8 * nbytes / weights


def gguf_bits(path):
    """Bits / weights over a GGUF's 2-D+ tensors but token_embd and the routers (ffn_gate_inp)."""
    import gguf
    nbytes = weights = 0
    for t in gguf.GGUFReader(str(path)).tensors:
        if len(t.shape) >= 2 and not t.name.startswith(("token_embd.", )) and "ffn_gate_inp" not in t.name:
            nbytes, weights = nbytes + int(t.n_bytes), weights + int(t.n_elements)
    return 8 * nbytes / weights


def score(path, saved, llm_kwargs, threads=1, bos=None):
    """compare() of the container's logits on the saved tokens (bos: see compare) -> its statistics + bits per
    weight."""
    from ...model.llm import LLM
    from ...testing.llama_cpp import compare
    with LLM(path, threads=threads, **llm_kwargs) as llm:
        out = compare(saved, llm.logits, bos=bos)
        out["bits_per_weight"] = bits_per_weight(llm.executor.model)
    return out


def tokens(hf_dir, text_path, n_ctx, chunks):
    """The text's ids by the checkpoint's tokenizer.json, cut in `chunks` rows of n_ctx (llama-perplexity's way)."""
    from tokenizers import Tokenizer
    with open(text_path, encoding="utf-8") as f:
        ids = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json")).encode(f.read()).ids
    if len(ids) < n_ctx * chunks:
        raise ValueError(f"{text_path}: {len(ids)} tokens, fewer than {chunks} chunks of {n_ctx}")
    return np.asarray(ids[:n_ctx * chunks], np.int32).reshape(chunks, n_ctx)


def reference(model, ids):
    """SavedLogprobs of the transformers float32 model on ids [chunks, n_ctx] (exact: no 16-bit codes)."""
    import torch
    from ...testing.llama_cpp import SavedLogprobs, log_softmax
    first = ids.shape[1] // 2
    with torch.no_grad():
        rows = [log_softmax(model(torch.from_numpy(c.astype(np.int64))[None]).logits[0].float().numpy())
                for c in ids]
    logprobs = np.stack([r[first:-1] for r in rows]).astype(np.float32)
    return SavedLogprobs(ids, logprobs, np.ones(logprobs.shape, bool), np.zeros(logprobs.shape[:2] + (1,),
                                                                               np.float32), first)
