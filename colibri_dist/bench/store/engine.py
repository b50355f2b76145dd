"""What the cache budget costs the MoeExecutor: one MoE layer's time per tier, same bits.

Role in the data flow: part of `python -m colibri_dist.bench store`. A random
Mixtral-style checkpoint (numpy + safetensors, no torch) is converted to int8
and one layer is run with every expert mapped (the fused native path, the
baseline), with a RAM cache holding every expert (streamed path, all hits),
and with a cache of two experts over the source and over the SSD spill tier.
Outputs are compared bit for bit against the baseline in the same run.
"""
import json
import os
import time

import numpy as np


def write_checkpoint(out_dir, hidden, inter, n_experts, top_k, seed=0):
    from safetensors.numpy import save_file
    rng = np.random.default_rng(seed)
    os.makedirs(out_dir, exist_ok=True)
    t = {"model.embed_tokens.weight": rng.standard_normal((16, hidden), dtype=np.float32)}
    p = "model.layers.0.block_sparse_moe"
    t[f"{p}.gate.weight"] = rng.standard_normal((n_experts, hidden), dtype=np.float32) * 0.1
    for e in range(n_experts):
        for name, shape in (("w1", (inter, hidden)), ("w3", (inter, hidden)), ("w2", (hidden, inter))):
            t[f"{p}.experts.{e}.{name}.weight"] = rng.standard_normal(shape, dtype=np.float32) * 0.02
    save_file(t, os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump({"model_type": "mixtral", "hidden_size": hidden, "intermediate_size": inter,
                   "num_local_experts": n_experts, "num_experts_per_tok": top_k, "num_hidden_layers": 1,
                   "vocab_size": 16}, f)
    return out_dir


def _time_layer(eng, x, reps):
    eng.moe_forward(0, x)                       # warm: first loads, page cache
    best, y = float("inf"), None
    for _ in range(reps):
        t0 = time.perf_counter()
        y = eng.moe_forward(0, x)
        best = min(best, time.perf_counter() - t0)
    return best, y


def engine_tiers(workdir, quick):
    from ...moe_executor import MoeExecutor
    from ...format.convert import convert
    hidden, inter, n_exp, k = (512, 256, 16, 4) if quick else (2048, 1024, 64, 8)
    src = write_checkpoint(os.path.join(workdir, "engine-src"), hidden, inter, n_exp, k)
    path = os.path.join(workdir, "engine.colibri")
    convert(src, path, experts="int8", progress=False)
    x = np.random.default_rng(1).standard_normal((16, hidden)).astype(np.float32)
    reps = 3 if quick else 5
    with MoeExecutor(path, threads=None) as eng:
        nb = eng.store.source.nbytes(0, 0)
        base_t, base_y = _time_layer(eng, x, reps)
    rows = [{"setup": "all mapped (fused cb_moe_forward)", "ms": base_t * 1e3, "exact": True}]
    setups = [("RAM cache holds all experts", dict(cache_bytes=(n_exp + 1) * nb)),
              ("RAM cache of 2 experts, source reads", dict(cache_bytes=2 * nb)),
              ("RAM cache of 2 experts, SSD spill", dict(cache_bytes=2 * nb,
                                                        offload_dir=os.path.join(workdir, "off")))]
    for name, kw in setups:
        with MoeExecutor(path, threads=None, **kw) as eng:
            t, y = _time_layer(eng, x, reps)
            st = eng.stats()
        rows.append({"setup": name, "ms": t * 1e3, "exact": bool(np.array_equal(y, base_y)),
                     "vs_mapped": t / base_t, "ssd_hits": st["ssd"]["hits"], "misses": st["misses"]})
    return {"hidden": hidden, "inter": inter, "experts": n_exp, "top_k": k, "tokens": int(x.shape[0]),
            "expert_bytes": nb, "rows": rows}
