"""`python -m colibri_dist.bench.scale.child ...`: one colibri measurement in a process of its own.

Role: scale/run.py starts it (inside a memory cgroup for the larger-than-RAM rows) so that start-up, peak
RSS and what was read from storage belong to this measurement alone. It opens the container as a user
would (LLM with the given RAM budget), times a first token, a 1 x `--prompt` prefill, then aggregate decode
of each `--parallel` count after a `--decode-prompt`-token prompt per sequence (llama-batched-bench's
S_PP / S_TG), and for every decode run the storage bytes read (/proc/self/io read_bytes) and the expert
cache's hits and misses (and what the store loaded and prefetched); its own peak RSS (VmHWM); optionally a
profile of decode steps (step_profile.py). Prints one JSON object on stdout.
"""
import argparse
import json
import sys
import time

T0 = time.perf_counter()

import numpy as np   # noqa: E402  (after T0: start-up includes the imports)


def _io_read():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("read_bytes:")).split()[1])


STORE_COUNTS = ("hits", "misses", "bytes_loaded", "prefetch_issued", "prefetch_used", "prefetch_dropped",
                "prefetch_late")


def _store(llm):
    st = llm.executor.stats()
    return {k: st[k] for k in STORE_COUNTS}


def _decode(llm, rng, seqs, gen):
    """gen steps of every sequence, each fed a fresh random token: text is a stream of mostly distinct tokens,
    where a random-weight model's own greedy output falls into loops that make any routing look local."""
    toks = rng.integers(0, llm.vocab_size, (gen, len(seqs)))
    t0 = time.perf_counter()
    for step in toks:
        llm.forward([(s, [int(t)], False) for s, t in zip(seqs, step)])
    return time.perf_counter() - t0


def _peak_rss():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM:")).split()[1]) * 1024


def run(llm, rng, prompt, gen, pl):
    """Prefill pl x prompt, then gen decode steps of all pl: speeds, storage bytes and cache hits of the decode."""
    seqs = [llm.new_sequence() for _ in range(pl)]
    try:
        prompts = [rng.integers(0, llm.vocab_size, prompt).tolist() for _ in range(pl)]
        r0, t0 = _io_read(), time.perf_counter()
        llm.forward([(s, p, False) for s, p in zip(seqs, prompts)])
        t_pp, r1, s1 = time.perf_counter() - t0, _io_read(), _store(llm)
        t_tg = _decode(llm, rng, seqs, gen)
        r2, s2 = _io_read(), _store(llm)
    finally:
        for s in seqs:
            llm.release(s)
    d = {k: s2[k] - s1[k] for k in STORE_COUNTS}
    gets = d["hits"] + d["misses"]
    return {"prefill_tok_s": pl * prompt / t_pp, "decode_tok_s": pl * gen / t_tg, "t_pp": t_pp, "t_tg": t_tg,
            "prefill_read_bytes": r1 - r0, "decode_read_bytes_per_token": (r2 - r1) / (pl * gen),
            "decode_hit_rate": d["hits"] / gets if gets else None, "decode_gets": gets, "decode_store": d}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench.scale.child")
    ap.add_argument("--path", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-bytes", type=int, default=None, help="the expert RAM budget (default: mmap, no budget)")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode-prompt", type=int, default=64)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--parallel", default="1,8,32")
    ap.add_argument("--policy", default="lru", help="the RAM cache's eviction policy (lru, lfu, lfru)")
    ap.add_argument("--kv-bytes", type=int, default=None, help="the KV cache budget (default: the LLM's)")
    ap.add_argument("--no-precheck", action="store_true", help="skip reading every expert once before timing")
    ap.add_argument("--profile-steps", type=int, default=0,
                    help="then profile this many 1-sequence decode steps (Python vs the C core; 0 = no)")
    args = ap.parse_args(argv)
    from ..model.peer_colibri import check_experts, prefault_kv
    from ...model import LLM
    pls = [int(p) for p in args.parallel.split(",") if p]
    rng = np.random.default_rng(0)
    most = max(max(pl * (args.decode_prompt + args.gen) for pl in pls), args.prompt + args.gen)
    out = {"cache_bytes": args.cache_bytes}
    with LLM(args.path, threads=args.threads, cache_bytes=args.cache_bytes, policy=args.policy, max_seq_len=max(4096, most),
             kv_cache_bytes=args.kv_bytes, max_num_seqs=max(pls)) as llm:
        t_open = time.perf_counter()
        first = run(llm, rng, 16, 1, 1)                          # a first token: start-up as a user sees it
        out["startup"] = {"open_s": t_open - T0, "first_token_s": time.perf_counter() - T0,
                          "first_prefill_16_s": first["t_pp"]}
        out["kv_prefault_s"] = prefault_kv(llm)
        out["expert_precheck_s"] = None if args.no_precheck else check_experts(llm)
        out["prefill"] = run(llm, rng, args.prompt, 2, 1)
        out["decode"] = {pl: run(llm, rng, args.decode_prompt, args.gen, pl) for pl in pls}
        if args.profile_steps:
            from .step_profile import profile
            out["step_profile"] = profile(llm, rng, args.profile_steps)
        out["simd"] = llm.executor.stats()["simd"]
        out["peak_rss"] = _peak_rss()
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
