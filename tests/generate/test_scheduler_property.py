"""Property: whatever the step budget, chunk size, sequence cap and KV budget, every request's tokens,
logprobs and finish reason (or scores) equal what it produces alone; requests too big for the KV cache
fail in both."""
import numpy as np
from hypothesis import given, settings, strategies as st

from colibri_dist.generate import SamplingParams, SchedulerConfig

from gen_engine import run_all
from gen_fake_model import FakeStepModel


def _model(blocks, block_size):
    return FakeStepModel(vocab_size=41, max_seq_len=40, block_size=block_size, num_blocks=blocks,
                         eos_token_ids=(2,), eos_boost=1.5)


def _key(res):
    if res.error is not None:
        return ("error",)
    if hasattr(res, "token_logprobs"):
        return ("score", res.token_logprobs, res.total_logprob)
    return (res.token_ids, res.logprobs, res.finish_reason)


def _run(model, cfg, reqs):
    return run_all(model, cfg, reqs)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 12), budget=st.integers(1, 40),
       chunk=st.one_of(st.none(), st.integers(1, 9)), max_seqs=st.integers(1, 8),
       blocks=st.integers(3, 40), block_size=st.integers(1, 6))
def test_any_schedule_equals_alone(seed, n, budget, chunk, max_seqs, blocks, block_size):
    rng = np.random.default_rng(seed)
    reqs = []
    for i in range(n):
        prompt = [int(t) for t in rng.integers(0, 41, int(rng.integers(1, 20)))]
        params = SamplingParams(max_tokens=int(rng.integers(1, 15)), temperature=float(rng.choice([0.0, 0.7, 1.5])),
                                top_k=int(rng.choice([0, 3])), top_p=float(rng.choice([1.0, 0.8])),
                                logprobs=[None, 0, 2][int(rng.integers(0, 3))], seed=int(rng.integers(0, 5)) if i % 2 else None)
        reqs.append(("score" if i % 4 == 3 else "generate", prompt, params, f"q{i}"))
    alone = [_run(_model(blocks, block_size), SchedulerConfig(), [r])[0] for r in reqs]
    m = _model(blocks, block_size)
    cfg = SchedulerConfig(max_num_batched_tokens=budget, prefill_chunk_size=chunk, max_num_seqs=max_seqs)
    together = _run(m, cfg, reqs)
    assert [_key(c) for c in together] == [_key(c) for c in alone]
    assert not m.live and m.used == 0
