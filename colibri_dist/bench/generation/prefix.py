"""`python -m colibri_dist.bench prefix [--rows 256] [--prefix-tokens 1024] [--suffix-tokens 32] [--json PATH]`.

Role: measures automatic prefix caching on a batch job (docs/PERFORMANCE.md, "Prefix caching"): --rows
prompts that share one --prefix-tokens random prefix, each with its own --suffix-tokens suffix, sent as
ONE generate() call with max_tokens=1 (prefill + one sampled token per row), once with
LLM(enable_prefix_caching=False) and once with it on (the default), on the same container and threads.
Rows whose prefix blocks another row computes in this step wait one step and match them (scheduler.py),
so the prefix is computed once. Prints and writes both wall times, the prompt tokens actually fed, the
hit rate and their ratio, and asserts the two runs gave the same tokens and logprobs bit for bit. Default model: the whole-model
benchmark's OLMoE-shaped container (bench/model/run.py, made once under --cache).
"""
import argparse
import json
import os
import sys
import time

import numpy as np


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench prefix", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help=".colibri whole model (default: the whole-model bench model)")
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "colibri"))
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--prefix-tokens", type=int, default=1024)
    ap.add_argument("--suffix-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--w8a8", action="store_true")
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048, help="tokens per model step (default 2048)")
    ap.add_argument("--on-only", action="store_true",
                    help="only the cached run (no baseline, no bits check: for a size whose uncached run does not fit)")
    ap.add_argument("--json", default="bench_prefix.json")
    return ap.parse_args(argv)


def prompts(rows, prefix, suffix, vocab, seed=0):
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, vocab, prefix).tolist()
    return [shared + rng.integers(0, vocab, suffix).tolist() for _ in range(rows)]


def run(path, rows, caching, threads, w8a8, step_tokens=2048):
    """-> (result dict, [(tokens, logprobs)] per row) of one generate() over `rows` with caching on or off."""
    from ...generate import SamplingParams
    from ...model.llm import LLM
    n_tokens = sum(len(r) for r in rows)
    with LLM(path, threads=threads, w8a8=w8a8, enable_prefix_caching=caching, max_num_seqs=64,
             max_num_batched_tokens=step_tokens) as llm:
        steps = []
        t = time.perf_counter()
        outs = llm.generate(rows, SamplingParams(max_tokens=1, logprobs=1, ignore_eos=True), on_step=steps.append,
                            use_tqdm=False, errors="return")
        wall = time.perf_counter() - t
        pc = llm.stats()["prefix_cache"]
    bad = [o.error for o in outs if o.error is not None]
    if bad:
        raise RuntimeError(f"bench prefix: {len(bad)} rows failed, first: {bad[0]}")
    fed = sum(s.prefill_tokens + s.decode_tokens for s in steps)
    model_s = sum(s.t_end - s.t_start for s in steps)
    res = {"prefix_caching": caching, "wall_s": wall, "step_s": model_s, "prompt_tokens": n_tokens,
           "tokens_fed": fed, "prompt_tokens_per_s": n_tokens / wall, "steps": len(steps),
           "hit_tokens": pc.get("hit_tokens", 0), "queried_tokens": pc.get("queried_tokens", 0),
           "hit_rate": pc.get("hit_rate")}
    return res, [(o.token_ids, [(lp.token_id, lp.logprob, lp.top) for lp in o.logprobs]) for o in outs]


def main(argv=None):
    from ..kernels.run import machine
    args = _args(argv)
    path = args.model
    if path is None:
        from ..model.run import FULL, checkpoint
        _, path = checkpoint(FULL, args.cache)
    from ...format.reader import open_model
    m = open_model(path)
    try:
        vocab = int(m.meta["source_config"]["vocab_size"])
    finally:
        m.close()
    rows = prompts(args.rows, args.prefix_tokens, args.suffix_tokens, vocab)
    report = {"command": " ".join([sys.executable, "-m", "colibri_dist.bench", "prefix"] + list(argv or sys.argv[2:])),
              "machine": machine(), "threads": args.threads, "model": path, "rows": args.rows,
              "prefix_tokens": args.prefix_tokens, "suffix_tokens": args.suffix_tokens, "w8a8": args.w8a8}
    if not args.on_only:
        off, bits_off = run(path, rows, False, args.threads, args.w8a8, args.max_num_batched_tokens)
        print(f"prefix caching off: {off['wall_s']:.2f} s for {off['prompt_tokens']} prompt tokens "
              f"({off['tokens_fed']} fed, {off['prompt_tokens_per_s']:.0f} prompt tok/s)")
    on, bits_on = run(path, rows, True, args.threads, args.w8a8, args.max_num_batched_tokens)
    print(f"prefix caching on:  {on['wall_s']:.2f} s ({on['tokens_fed']} fed, hit rate {on['hit_rate']:.3f}, "
          f"{on['prompt_tokens_per_s']:.0f} prompt tok/s)")
    if args.on_only:
        same = True
        report.update(on=on, off=None, same_bits=None, speedup=None)
        print("on only: no uncached baseline, no bits check")
    else:
        same = bits_on == bits_off
        report.update(off=off, on=on, same_bits=same, speedup=off["wall_s"] / on["wall_s"])
        print(f"speedup {report['speedup']:.2f}x, same bits: {same}")
    report["loadavg_after"] = list(os.getloadavg())
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.json}")
    if not same:
        print("bench prefix: the cached run's tokens/logprobs differ from the uncached run", file=sys.stderr)
        return 1
    return 0
