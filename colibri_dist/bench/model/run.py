"""`python -m colibri_dist.bench model [--quick] [--threads N] [--json PATH]`: whole-model speed vs this machine.

Role: one run measures (1) the machine's read bandwidth; (2) cd.LLM on an OLMoE-shaped model with
random weights (4 layers, hidden 2048, 16 heads, expert inter 1024, 64 experts, top 8, vocab
50304; int8 experts and dense, weight-only and in w8a8 mode; the `--preset q4_k_m` container, int4-g64
experts and dense + int8 lm_head, in w4a8 mode): decode of 1 sequence (bytes read per token / time, as a ratio of
the bandwidth), aggregate decode tok/s of 32 sequences at once, prefill tok/s of 8 x 512-token
prompts; (3) transformers bf16 on the same checkpoint and thread count: generate decode tok/s at
1 and 32 sequences and prefill tok/s at batch 8. Prints ratios, writes JSON. No thresholds.
The checkpoint and container are made once into ~/.cache/colibri/bench-model-<shape>.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

FULL = dict(layers=4, hidden=2048, heads=16, inter=1024, experts=64, top_k=8, vocab=50304,
            prompt=512, prefill_batch=8, decode_steps=32, seqs=32, bw_mib=1024)
QUICK = dict(layers=2, hidden=128, heads=4, inter=64, experts=8, top_k=2, vocab=512,
             prompt=32, prefill_batch=2, decode_steps=4, seqs=4, bw_mib=64)


def checkpoint(cfg, root):
    """A random OLMoE-shaped bf16 checkpoint and its int8 container, made once."""
    import torch
    import transformers
    key = "-".join(str(cfg[k]) for k in ("layers", "hidden", "heads", "inter", "experts", "top_k", "vocab"))
    d = os.path.join(root, f"bench-model-{key}")
    src, dst = os.path.join(d, "hf"), os.path.join(d, "model-int8.colibri")
    if not os.path.exists(os.path.join(src, "config.json")):
        hf_cfg = transformers.OlmoeConfig(vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
                                          intermediate_size=cfg["inter"], num_hidden_layers=cfg["layers"],
                                          num_attention_heads=cfg["heads"], num_key_value_heads=cfg["heads"],
                                          num_experts=cfg["experts"], num_experts_per_tok=cfg["top_k"],
                                          max_position_embeddings=4096, tie_word_embeddings=False)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.bfloat16)
        model.save_pretrained(src)
        del model
    if not os.path.exists(dst):
        from ...format.convert import convert
        convert(src, dst, experts="int8", dense="int8", progress=False, force=True)
    return src, dst


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def decode_bytes_per_token(llm):
    """Bytes one decode token reads: every dense matrix (attention, lm_head, dense MLPs), the routers, shared
    experts and top_k experts per MoE layer (format/token_bytes.py, the same count `colibri convert` prints)."""
    from ...format import token_bytes
    return token_bytes.ours(llm.executor.model)["total"]


def ours(path, cfg, threads, rng, w8a8=False):
    from ...model import LLM
    from .peer_colibri import check_experts, prefault_kv
    out = {}
    with LLM(path, threads=threads, kv_cache_bytes=1 << 30, w8a8=w8a8) as llm:
        V = llm.vocab_size
        prompts = [rng.integers(0, V, cfg["prompt"]).tolist() for _ in range(cfg["prefill_batch"])]
        prefault_kv(llm)                                           # as llama.cpp clears its KV buffer
        check_experts(llm)                                         # first-use CRCs outside the timing
        llm.logits_batch([prompts[0][:16]])                        # warm-up: maps, arena
        seqs = [llm.new_sequence() for _ in prompts]
        t, _ = _timed(lambda: llm.forward([(s, p, False) for s, p in zip(seqs, prompts)]))
        for s in seqs:
            llm.release(s)
        out["prefill"] = {"tokens": cfg["prompt"] * len(prompts), "seconds": t,
                          "tokens_per_s": cfg["prompt"] * len(prompts) / t}
        for n in (1, cfg["seqs"]):
            seqs = [llm.new_sequence() for _ in range(n)]
            llm.forward([(s, rng.integers(0, V, 16).tolist(), False) for s in seqs])
            toks = [[int(x)] for x in rng.integers(0, V, n)]
            steps = []
            for _ in range(cfg["decode_steps"]):
                t, logits = _timed(lambda: llm.forward([(s, tk, False) for s, tk in zip(seqs, toks)]))
                toks = [[int(np.argmax(lg[-1]))] for lg in logits]
                steps.append(t)
            for s in seqs:
                llm.release(s)
            t = float(np.median(steps))
            out[f"decode_{n}"] = {"sequences": n, "step_seconds_median": t, "tokens_per_s": n / t}
        nbytes = decode_bytes_per_token(llm)
        out["decode_1"]["bytes_per_token"] = nbytes
        out["decode_1"]["bytes_per_s"] = nbytes / out["decode_1"]["step_seconds_median"]
        out["stats"] = {k: v for k, v in llm.stats().items() if k in ("kv_cache", "tokens_processed")}
    return out


def transformers_bf16(src, cfg, threads, rng):
    import torch
    import transformers
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).eval()
    V, out = cfg["vocab"], {}
    with torch.no_grad():
        x = torch.from_numpy(rng.integers(0, V, (cfg["prefill_batch"], cfg["prompt"])))
        model(x[:, :16])
        t, _ = _timed(lambda: model(x, logits_to_keep=1))
        out["prefill"] = {"tokens": x.numel(), "seconds": t, "tokens_per_s": x.numel() / t}
        for n in (1, cfg["seqs"]):
            p = torch.from_numpy(rng.integers(0, V, (n, 16)))
            kw = dict(attention_mask=torch.ones_like(p), do_sample=False, pad_token_id=0, eos_token_id=None)
            t0, _ = _timed(lambda: model.generate(p, max_new_tokens=1, min_new_tokens=1, **kw))
            t1, _ = _timed(lambda: model.generate(p, max_new_tokens=1 + cfg["decode_steps"],
                                                  min_new_tokens=1 + cfg["decode_steps"], **kw))
            per_step = (t1 - t0) / cfg["decode_steps"]
            out[f"decode_{n}"] = {"sequences": n, "step_seconds": per_step, "tokens_per_s": n / per_step}
    return out


def main(argv=None):
    from ..kernels.run import machine, read_bandwidth
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench model", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes: proves the benchmark runs")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", default="bench_model.json")
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "colibri"))
    ap.add_argument("--no-transformers", action="store_true", help="skip the transformers bf16 baseline")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    rng = np.random.default_rng(0)
    report = {"command": " ".join([sys.executable, "-m", "colibri_dist.bench", "model"] + list(argv or sys.argv[2:])),
              "machine": machine(), "threads": args.threads, "config": cfg}
    src, path = checkpoint(cfg, args.cache)
    bw, _ = read_bandwidth(cfg["bw_mib"], args.threads)
    report["read_bandwidth_bytes_per_s"] = bw
    print(f"read bandwidth: {bw / 1e9:.1f} GB/s")
    from .peer_colibri import container
    q4 = container(src, os.path.dirname(src), "int4-g64", "int4-g64", "int8")
    modes = {"colibri_int8": (path, False), "colibri_int8_w8a8": (path, True), "colibri_q4_k_m_w4a8": (q4, True)}
    for name, (file, w8a8) in modes.items():
        r = report[name] = ours(file, cfg, args.threads, np.random.default_rng(0), w8a8=w8a8)
        d1, dn = r["decode_1"], r[f"decode_{cfg['seqs']}"]
        d1["ratio_to_bandwidth"] = d1["bytes_per_s"] / bw
        print(f"{name} decode, 1 sequence: {d1['tokens_per_s']:.1f} tok/s, {d1['bytes_per_token'] / 1e6:.0f} MB/token "
              f"-> {d1['bytes_per_s'] / 1e9:.1f} GB/s = {d1['ratio_to_bandwidth']:.2f} x read bandwidth")
        print(f"{name} decode, {cfg['seqs']} sequences: {dn['tokens_per_s']:.1f} tok/s aggregate")
        print(f"{name} prefill {cfg['prefill_batch']} x {cfg['prompt']}: {r['prefill']['tokens_per_s']:.0f} tok/s")
    if not args.no_transformers:
        t = report["transformers_bf16"] = transformers_bf16(src, cfg, args.threads, rng)
        for key in ("decode_1", f"decode_{cfg['seqs']}", "prefill"):
            print(f"transformers bf16 {key}: {t[key]['tokens_per_s']:.1f} tok/s")
        ratios = report["ratios"] = {}
        for name in modes:
            r = report[name]
            for key in ("decode_1", f"decode_{cfg['seqs']}", "prefill"):
                ratios[f"{name}_{key}_vs_transformers_bf16"] = r[key]["tokens_per_s"] / t[key]["tokens_per_s"]
        for k, v in ratios.items():
            print(f"ratio {k}: {v:.2f}x")
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.json}")
    return 0
