"""The colibri side of `python -m colibri_dist.bench peer`: the benchmark checkpoint's containers and one
engine's measurements, shaped like llama-batched-bench's so the two sit in one table.

Role: ENGINES names each column (container encodings + runtime mode); container() converts the bf16
checkpoint once per encoding set into the cache folder; IMPORTED names the columns run on llama.cpp's own GGUF
file of a type (peer_llama.py makes it), imported by colibri's GGUF import (imported(): the blocks kept bit for
bit, so both engines read the very same weights); COLUMNS is both; measure() opens one LLM (one model resident
at a time), prefills `prompt` tokens for each of `pl` sequences in one forward call and times it, then
times `gen` decode steps of all of them together: prefill tok/s = pl*prompt / t_pp and aggregate decode
tok/s = pl*gen / t_tg, as llama-batched-bench defines S_PP and S_TG.
"""
import os
import time

import numpy as np

from ...format.presets import PRESETS

# column name: (experts, dense, lm_head, LLM keyword arguments; w8a8 spelled out, whatever LLM's default)
ENGINES = {
    "colibri int8": ("int8", "int8", "int8", {"w8a8": False}),
    "colibri int8 + w8a8": ("int8", "int8", "int8", {"w8a8": True}),
    "colibri int4-g64 (+ int8 dense)": ("int4-g64", "int8", "int8", {"w8a8": False}),
    "colibri q4_k_m preset": (*PRESETS["q4_k_m"][:3], {"w8a8": False}),
    "colibri q4_k_m preset + w4a8": (*PRESETS["q4_k_m"][:3], {"w8a8": True}),
    "colibri int4-g64 all (lm_head too) + w4a8": ("int4-g64", "int4-g64", "int4-g64", {"w8a8": True}),
    # llama.cpp's block encodings themselves (our quantizer), multiplied as llama.cpp does: Q8_K activations
    "colibri q4_k (head q6_k) + Q8_K": ("q4_k", "q4_k", "q6_k", {"w8a8": True}),
}

# column name: (the llama.cpp file type imported, LLM keyword arguments)
IMPORTED = {"colibri imported llama.cpp Q4_K_M + Q8_K": ("Q4_K_M", {"w8a8": True}),
            # the same with an f16 KV cache, as llama-batched-bench keeps its own (colibri's default is f32)
            "colibri imported llama.cpp Q4_K_M + Q8_K (f16 KV)": ("Q4_K_M", {"w8a8": True, "kv_cache_dtype": "f16"})}
COLUMNS = {**{k: v[3] for k, v in ENGINES.items()}, **{k: v[1] for k, v in IMPORTED.items()}}   # name: LLM kwargs


def encodings(name):
    """What a column's container holds, for the report: its (experts, dense, lm_head) or the imported file type."""
    return ENGINES[name][:3] if name in ENGINES else f"imported llama.cpp {IMPORTED[name][0]}"


def imported(gguf_path, cache_dir):
    """Path of the container imported from llama.cpp's GGUF file (made once per importer revision, beside the
    other containers)."""
    from ...format.convert import convert
    from ...format.gguf_import import REVISION
    name = f"imported-{os.path.basename(gguf_path).removesuffix('.gguf')}-rev{REVISION}.colibri"
    path = os.path.join(cache_dir, name)
    if not os.path.exists(path):
        convert(gguf_path, path, progress=False, force=True)
    return path


def container(hf_dir, cache_dir, experts, dense, lm_head):
    """Path of the checkpoint converted with these encodings (made once)."""
    from ...format.convert import convert
    name = "model-int8.colibri" if (experts, dense, lm_head) == ("int8",) * 3 else \
        f"model-{experts}-dense-{dense}-head-{lm_head}.colibri"
    path = os.path.join(cache_dir, name)
    if not os.path.exists(path):
        convert(hf_dir, path, experts=experts, dense=dense, lm_head=lm_head, progress=False, force=True)
    return path


def prefault_kv(llm):
    """Writes every page of the KV pools once before timing, as llama.cpp clears its KV buffer when it
    creates a context: first touches of fresh anonymous memory (a 2 MiB huge page zeroed, and in a VM the
    host backing it) otherwise land inside the timed decode steps (measured ~1 ms per kv_write call at
    32 sequences here against 40 us on touched pools). Returns the seconds it took."""
    t = time.perf_counter()
    pools = {id(a): a for a in (*llm.cache.k, *llm.cache.v)}     # v is k itself when K and V share a pool
    for pool in pools.values():
        pool.fill(0)
    return time.perf_counter() - t


def check_experts(llm):
    """Runs every expert's first-use check (CRC and finite values, format/reader.py) before timing: the
    first timed prefill would otherwise pay it for every expert it routes to (llama.cpp checks nothing at
    run time). Returns the seconds it took."""
    t, model = time.perf_counter(), llm.executor.model
    for layer in model.moe_layers:
        for e in range(model.config.n_experts):
            model.expert_blob(layer, e)
    return time.perf_counter() - t


def _decode(llm, seqs, first, gen):
    toks = [[int(t)] for t in first]
    t0 = time.perf_counter()
    for _ in range(gen):
        logits = llm.forward([(s, tk, False) for s, tk in zip(seqs, toks)])
        toks = [[int(np.argmax(lg[-1]))] for lg in logits]
    return time.perf_counter() - t0


def run_pl(llm, rng, prompt, gen, pl):
    """One llama-batched-bench-shaped measurement at `pl` sequences -> speeds."""
    V = llm.vocab_size
    seqs = [llm.new_sequence() for _ in range(pl)]
    try:
        prompts = [rng.integers(0, V, prompt).tolist() for _ in range(pl)]
        t0 = time.perf_counter()
        logits = llm.forward([(s, p, False) for s, p in zip(seqs, prompts)])
        t_pp = time.perf_counter() - t0
        t_tg = _decode(llm, seqs, [np.argmax(lg[-1]) for lg in logits], gen)
    finally:
        for s in seqs:
            llm.release(s)
    return {"prefill_tok_s": pl * prompt / t_pp, "decode_tok_s": pl * gen / t_tg, "t_pp": t_pp, "t_tg": t_tg,
            "n_kv": pl * (prompt + gen)}


def measure(path, kwargs, threads, runs, seed=0):
    """{(prompt, gen): {pl: speeds}} for runs = [(prompt, gen, [pl, ...]), ...] on one LLM, plus bytes/token."""
    from ...model import LLM
    from ...format import token_bytes
    rng = np.random.default_rng(seed)
    out = {}
    most = max(pl * (prompt + gen) for prompt, gen, pls in runs for pl in pls)
    kv = max(1 << 30, (most + 4096) * (64 << 10))     # 64 KiB of KV per token covers the benchmark shapes
    with LLM(path, threads=threads, kv_cache_bytes=kv, **kwargs) as llm:
        prefault_kv(llm)
        check_experts(llm)
        run_pl(llm, rng, 16, 2, 1)                                   # warm-up: maps, arena, pool
        for prompt, gen, pls in runs:
            out[(prompt, gen)] = {pl: run_pl(llm, rng, prompt, gen, pl) for pl in pls}
        nbytes = token_bytes.ours(llm.executor.model)["total"]
    return out, nbytes
