"""Property: whatever the step budget, chunk size, sequence cap and KV budget, every request's tokens,
logprobs and finish reason equal what it produces alone (requests too big for the KV cache fail in both)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from colibri_dist.generate import SamplingParams, SchedulerConfig
from colibri_dist.generate.api import generate

from gen_fake_model import FakeStepModel


def _model(blocks, block_size):
    return FakeStepModel(vocab_size=41, max_seq_len=40, block_size=block_size, num_blocks=blocks,
                         eos_token_ids=(2,), eos_boost=1.5)


def _key(c):
    return (c.token_ids if c.error is None else None, c.logprobs, c.finish_reason, c.error is None)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 12), budget=st.integers(1, 40),
       chunk=st.one_of(st.none(), st.integers(1, 9)), max_seqs=st.integers(1, 8),
       blocks=st.integers(3, 40), block_size=st.integers(1, 6))
def test_any_schedule_equals_alone(seed, n, budget, chunk, max_seqs, blocks, block_size):
    rng = np.random.default_rng(seed)
    prompts = [[int(t) for t in rng.integers(0, 41, int(rng.integers(1, 20)))] for _ in range(n)]
    params = [SamplingParams(max_tokens=int(rng.integers(1, 15)), temperature=float(rng.choice([0.0, 0.7, 1.5])),
                             top_k=int(rng.choice([0, 3])), top_p=float(rng.choice([1.0, 0.8])),
                             logprobs=int(rng.integers(0, 3)), seed=int(rng.integers(0, 5)) if i % 2 else None)
              for i in range(n)]
    ids = [f"q{i}" for i in range(n)]
    alone = [generate(_model(blocks, block_size), None, [p], [sp], request_ids=[r])[0]
             for p, sp, r in zip(prompts, params, ids)]
    m = _model(blocks, block_size)
    cfg = SchedulerConfig(max_num_batched_tokens=budget, prefill_chunk_size=chunk, max_num_seqs=max_seqs)
    together = generate(m, None, prompts, params, cfg, request_ids=ids)
    assert [_key(c) for c in together] == [_key(c) for c in alone]
    assert not m.live and m.used == 0
