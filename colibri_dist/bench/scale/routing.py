"""What routing a checkpoint really has: experts reused by the next token, and how popular the popular ones are.

Role: measure(path, ...) decodes one sequence of random tokens through a Recorder (an MoE executor that asks the
engine for each layer's routing, keeps it, then runs the layer as the engine would) and summarizes:
  reuse           mean over MoE layers and consecutive decode tokens of |experts(t) & experts(t+1)| / top_k
                  (chance level, every expert alike: top_k / n_experts)
  top10_share     the share of routed slots that went to the 10% most used experts of each layer (0.10 = flat)
  used_fraction   the fraction of a layer's experts that the decode used at all
The knobs of checkpoint.py set these; the report prints what was measured, not what was asked for.
`python -m colibri_dist.bench.scale.routing PATH THREADS` runs it in a process of its own (the bench does,
so that the opened model's pages do not stay in the bench's own memory).
"""
import numpy as np


class Recorder:
    """moe_forward(layer, x) = the engine's, with each token's experts kept per layer."""

    def __init__(self, engine):
        self.executor = engine
        self.picks = {}                  # layer -> list of int32 [k] arrays, one per token

    def moe_forward(self, layer, x):
        idx, _ = self.executor.route(layer, x)
        self.picks.setdefault(layer, []).extend(np.sort(idx, axis=1))
        return self.executor.moe_forward(layer, x)


def summarize(picks, n_experts, top_k):
    reuse, top10, used = [], [], []
    for rows in picks.values():
        if len(rows) < 2:
            continue
        sets = [set(r.tolist()) for r in rows]
        reuse.append(np.mean([len(a & b) / top_k for a, b in zip(sets, sets[1:])]))
        counts = np.bincount(np.concatenate(rows), minlength=n_experts)
        top = np.sort(counts)[::-1][:max(1, n_experts // 10)]
        top10.append(top.sum() / counts.sum())
        used.append(np.count_nonzero(counts) / n_experts)
    return {"reuse": float(np.mean(reuse)), "reuse_chance": top_k / n_experts,
            "reuse_by_layer": [float(r) for r in reuse], "top10_share": float(np.mean(top10)),
            "used_fraction": float(np.mean(used)), "tokens": len(next(iter(picks.values()))) if picks else 0}


def measure(path, threads, prompt=64, steps=64, seed=0, w8a8=True):
    """Routing of one sequence: `prompt` random tokens, then `steps` decode steps of further random tokens
    (decode rows only). Random, not greedy: a random-weight model's greedy output falls into loops of one
    token, which would make any routing look local; text is a stream of mostly distinct tokens."""
    from ...model import LLM
    rng = np.random.default_rng(seed)
    with LLM(path, threads=threads, w8a8=w8a8, kv_cache_bytes=256 << 20, max_seq_len=4096,
             enable_prefix_caching=False) as llm:
        rec = llm.decoder.moe = Recorder(llm.executor)          # the decoder's executor: anything with moe_forward
        seq = llm.new_sequence()
        llm.forward([(seq, rng.integers(0, llm.vocab_size, prompt).tolist(), False)])
        rec.picks.clear()                                      # decode tokens only
        for t in rng.integers(0, llm.vocab_size, steps):
            llm.forward([(seq, [int(t)], False)])
        cfg = llm.executor.config
        return summarize(rec.picks, cfg.n_experts, cfg.gating.top_k)


def main(argv=None):
    """`python -m colibri_dist.bench.scale.routing PATH THREADS`: measure() in a process of its own (JSON)."""
    import json
    import sys
    argv = sys.argv[1:] if argv is None else argv
    json.dump(measure(argv[0], int(argv[1])), sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
