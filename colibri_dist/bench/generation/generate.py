"""`python -m colibri_dist.bench generate [--model PATH] [--seqs 32] [--json PATH]`.

Role in the data flow: measures what the generation layer costs around the model (docs/PERFORMANCE.md,
"Generation"), both in one run:
  1. around-model cost at --seqs concurrent sequences: wall time of generate() minus the time spent
     inside model.forward (schedule, sample, detokenize, stop checks), per token and as % of model time,
     for greedy, for top-p sampling, and for top-p with repetition/presence/frequency penalties;
  2. with --model: time to first token of one --prompt-tokens prompt through generate() against the
     model's own prefill of the same prompt (one forward), and the load time, reported separately.
Without --model a synthetic step model of --vocab logits that costs ~nothing stands in, so (1) is the
layer's own per-token cost.
"""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np

from ...generate import SamplingParams, SchedulerConfig
from ...generate.api import generate


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench generate")
    ap.add_argument("--model", default=None, help=".colibri whole model (default: a synthetic step model)")
    ap.add_argument("--vocab", type=int, default=32000, help="synthetic model's vocabulary (default 32000)")
    ap.add_argument("--flat", action="store_true", help="synthetic model: flat (standard-normal) logits")
    ap.add_argument("--seqs", type=int, default=32, help="concurrent sequences (default 32)")
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="write results here")
    return ap.parse_args(argv)


class SyntheticModel:
    """Step model whose forward hands out precomputed float32 rows: the layer's cost alone. The rows are
    shaped like a language model's (Zipf: the r-th likeliest token has logit -1.1 ln r, ids shuffled,
    plus noise); `flat=True` gives standard-normal rows instead, the worst case of top-p (its nucleus
    is most of the vocabulary, so it needs a whole-row sort)."""

    def __init__(self, vocab, max_seq_len=1 << 16, flat=False):
        self.vocab_size, self.max_seq_len, self.eos_token_ids, self.block_size = vocab, max_seq_len, (), 16
        rng = np.random.default_rng(0)
        if flat:
            self.rows = rng.standard_normal((97, vocab)).astype(np.float32)
        else:
            zipf = -1.1 * np.log(np.arange(1, vocab + 1))
            self.rows = np.stack([rng.permutation(zipf) + 0.1 * rng.standard_normal(vocab)
                                  for _ in range(97)]).astype(np.float32)
        self.calls = 0
        self.tokenizer = None

    def free_blocks(self):
        return 1 << 30

    def blocks_needed(self, seq, n_new):
        return 0

    def new_sequence(self):
        return object()

    def release(self, seq):
        pass

    def forward(self, steps):
        self.calls += 1
        return [self.rows[(i + self.calls) % 97][None] if not want_all else
                np.repeat(self.rows[:1], len(toks), axis=0) for i, (_, toks, want_all) in enumerate(steps)]


class Timed:
    """Wraps a step model and adds up the time spent inside forward()."""

    def __init__(self, model):
        self.model, self.forward_s = model, 0.0
        for name in ("vocab_size", "max_seq_len", "eos_token_ids", "block_size"):
            setattr(self, name, getattr(model, name))

    def free_blocks(self):
        return self.model.free_blocks()

    def blocks_needed(self, seq, n_new):
        return self.model.blocks_needed(seq, n_new)

    def new_sequence(self):
        return self.model.new_sequence()

    def release(self, seq):
        self.model.release(seq)

    def forward(self, steps):
        t = time.perf_counter()
        try:
            return self.model.forward(steps)
        finally:
            self.forward_s += time.perf_counter() - t


def around_model(model, tokenizer, a, rng):
    prompts = [[int(t) for t in rng.integers(3, model.vocab_size, a.prompt_tokens)] for _ in range(a.seqs)]
    out = {}
    for name, sp in (("greedy", SamplingParams(max_tokens=a.max_tokens, temperature=0, ignore_eos=True)),
                     ("top_p", SamplingParams(max_tokens=a.max_tokens, temperature=0.8, top_p=0.9, seed=1,
                                              ignore_eos=True)),
                     ("penalties", SamplingParams(max_tokens=a.max_tokens, temperature=0.8, top_p=0.9, seed=1,
                                                  repetition_penalty=1.1, presence_penalty=0.2,
                                                  frequency_penalty=0.2, ignore_eos=True))):
        timed = Timed(model)
        t = time.perf_counter()
        res = generate(timed, tokenizer, prompts, sp, SchedulerConfig(max_num_seqs=a.seqs,
                                                                      max_num_batched_tokens=max(2048, a.seqs)))
        wall = time.perf_counter() - t
        tokens = sum(len(c.token_ids) for c in res)
        around = wall - timed.forward_s
        out[name] = {"wall_s": wall, "model_s": timed.forward_s, "around_model_s": around, "tokens": tokens,
                     "around_us_per_token": 1e6 * around / tokens,
                     "around_pct_of_model": 100.0 * around / timed.forward_s if timed.forward_s > 0 else None}
    return out


def first_token(model, tokenizer, a, rng):
    prompt = [int(t) for t in rng.integers(3, model.vocab_size, a.prompt_tokens)]
    seq = model.new_sequence()
    t = time.perf_counter()
    model.forward([(seq, prompt, False)])
    prefill = time.perf_counter() - t
    model.release(seq)
    first = []
    t = time.perf_counter()
    generate(model, tokenizer, [prompt], SamplingParams(max_tokens=1, temperature=0),
             on_token=lambda e: first.append(time.perf_counter()))
    ttft = first[0] - t
    return {"prefill_s": prefill, "ttft_s": ttft, "ratio": ttft / prefill}


def main(argv=None):
    a = _args(argv)
    rng = np.random.default_rng(0)
    res = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0]},
           "seqs": a.seqs, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens}
    if a.model:
        from ...model import LLM
        t = time.perf_counter()
        llm = LLM(a.model, threads=a.threads)
        res["model"] = {"path": os.path.abspath(a.model), "load_s": time.perf_counter() - t,
                        "vocab": llm.vocab_size}
        try:
            first_token(llm, llm.tokenizer, a, rng)            # warm-up
            res["first_token"] = first_token(llm, llm.tokenizer, a, rng)
            res["around_model"] = around_model(llm, llm.tokenizer, a, rng)
        finally:
            llm.close()
    else:
        res["model"] = {"synthetic_vocab": a.vocab, "flat": a.flat}
        res["around_model"] = around_model(SyntheticModel(a.vocab, flat=a.flat), None, a, rng)
    for name, r in res["around_model"].items():
        pct = r["around_pct_of_model"]
        print(f"{name:9s}: {r['tokens']} tokens, around the model {r['around_us_per_token']:.1f} us/token"
              + (f" = {pct:.1f}% of the model's own time" if pct is not None and a.model else ""))
    if "first_token" in res:
        f = res["first_token"]
        print(f"first token {1e3 * f['ttft_s']:.2f} ms vs prefill {1e3 * f['prefill_s']:.2f} ms "
              f"(x{f['ratio']:.2f}); load {res['model']['load_s']:.2f} s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0
