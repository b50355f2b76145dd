"""Continuous batching: exact batch invariance, chunked prefill, preemption, stop conditions, errors."""
import numpy as np
import pytest

from colibri_dist.generate import SamplingParams, SchedulerConfig
from colibri_dist.generate.api import generate, score
from colibri_dist.generate.sampler import log_softmax
from colibri_dist.generate import LLMEngine

from gen_engine import run_all
from gen_fake_model import FakeStepModel

VOCAB = 97


def _mixed_requests(n, seed=0):
    rng = np.random.default_rng(seed)
    prompts, params = [], []
    for i in range(n):
        prompts.append([int(t) for t in rng.integers(0, VOCAB, int(rng.integers(1, 41)))])
        kind = i % 3
        mt = int(rng.integers(1, 21))
        if kind == 0:
            params.append(SamplingParams(max_tokens=mt, temperature=0.0, logprobs=int(i % 4) or None))
        elif kind == 1:
            params.append(SamplingParams(max_tokens=mt, temperature=0.9, top_k=int(i % 7), top_p=0.9, seed=i,
                                         logprobs=2))
        else:                                   # seed derived from the base seed and the request id
            params.append(SamplingParams(max_tokens=mt, temperature=1.3, top_p=0.7))
    return prompts, params


def _model(**kw):
    kw.setdefault("vocab_size", VOCAB)
    kw.setdefault("eos_token_ids", (5,))
    kw.setdefault("eos_boost", 2.0)
    return FakeStepModel(**kw)


def _key(c):
    return (c.token_ids, c.finish_reason, c.logprobs, c.error)


def _run(prompts, params, ids, cfg=None, **model_kw):
    m = _model(**model_kw)
    out = generate(m, None, prompts, params, cfg, request_ids=ids)
    return out, m


PROMPTS, PARAMS = _mixed_requests(65)
IDS = [f"row-{i}" for i in range(65)]


@pytest.fixture(scope="module")
def alone():
    return [_run([p], [sp], [rid])[0][0] for p, sp, rid in zip(PROMPTS, PARAMS, IDS)]


def test_requests_finish_for_all_reasons(alone):
    reasons = {c.finish_reason for c in alone}
    assert reasons == {"length", "stop"} and all(c.error is None for c in alone)
    assert {c.stop_reason for c in alone} == {None}             # eos: "stop" with stop_reason None (vLLM)


CONFIGS = [
    dict(cfg=SchedulerConfig()),
    dict(cfg=SchedulerConfig(max_num_batched_tokens=7, prefill_chunk_size=3)),
    dict(cfg=SchedulerConfig(max_num_batched_tokens=16, prefill_chunk_size=5, max_num_seqs=4)),
    dict(cfg=SchedulerConfig(max_num_batched_tokens=1)),
    dict(cfg=SchedulerConfig(max_num_batched_tokens=64, prefill_chunk_size=11), num_blocks=16, block_size=4),
    dict(cfg=SchedulerConfig(max_num_batched_tokens=9), num_blocks=40, block_size=2),
]


@pytest.mark.parametrize("conf", CONFIGS, ids=range(len(CONFIGS)))
def test_all_together_equals_alone(alone, conf):
    out, m = _run(PROMPTS, PARAMS, IDS, conf["cfg"], **{k: v for k, v in conf.items() if k != "cfg"})
    assert [_key(c) for c in out] == [_key(c) for c in alone]
    cfg = conf["cfg"]
    assert all(sum(n for _, n in call) <= cfg.max_num_batched_tokens for call in m.calls)
    assert all(len(call) <= cfg.max_num_seqs for call in m.calls)
    assert not m.live and m.used == 0          # every sequence released


def test_tiny_kv_budget_preempts():
    eng = LLMEngine(_model(num_blocks=16, block_size=4), None, SchedulerConfig(max_num_batched_tokens=64))
    run_all(None, None, [("generate", p, sp, rid) for p, sp, rid in zip(PROMPTS, PARAMS, IDS)], engine=eng)
    assert eng.scheduler.stats["preemptions"] > 0


@pytest.mark.parametrize("k", [1, 2, 8, 64])
def test_one_request_among_k_others(alone, k):
    target = 10
    others = [i for i in range(65) if i != target][:k]
    order = others[:k // 2] + [target] + others[k // 2:]
    out, _ = _run([PROMPTS[i] for i in order], [PARAMS[i] for i in order], [IDS[i] for i in order],
                  SchedulerConfig(max_num_batched_tokens=13, prefill_chunk_size=4), num_blocks=30)
    for i, c in zip(order, out):
        assert _key(c) == _key(alone[i])


def test_same_seed_same_prompt_same_tokens():
    sp = SamplingParams(max_tokens=12, temperature=1.0, seed=42)
    out, _ = _run([[1, 2, 3], [9, 9], [1, 2, 3]], [sp, sp, sp], ["a", "b", "c"])
    assert out[0].token_ids == out[2].token_ids != out[1].token_ids
    other, _ = _run([[1, 2, 3]], [SamplingParams(max_tokens=12, temperature=1.0, seed=43)], ["a"])
    assert other[0].token_ids != out[0].token_ids


def test_greedy_matches_reference_argmax_with_ties():
    m = _model(levels=1, eos_token_ids=())
    out = generate(m, None, [[4, 8, 15]], SamplingParams(max_tokens=10, temperature=0, logprobs=1))[0]
    ref_model = _model(levels=1, eos_token_ids=())
    hist, ties = [4, 8, 15], 0
    for tok, lp in zip(out.token_ids, out.logprobs):
        logits = ref_model.reference_logits(hist)[-1]
        ties += int(np.count_nonzero(logits == logits.max()) > 1)
        assert tok == int(np.flatnonzero(logits == logits.max())[0])
        assert lp.logprob == float(log_softmax(logits)[tok]) and lp.rank == 1
        hist.append(tok)
    assert ties > 0 and out.finish_reason == "length" and len(out.token_ids) == 10


def test_stop_conditions():
    m = _model(eos_token_ids=())
    free = generate(m, None, [[1, 2]], SamplingParams(max_tokens=20, temperature=0))[0]
    stop_tok = free.token_ids[3]
    first = free.token_ids.index(stop_tok)
    out = generate(_model(eos_token_ids=()), None, [[1, 2]], SamplingParams(max_tokens=20, temperature=0,
                                                                            stop_token_ids=[stop_tok]))[0]
    assert out.token_ids == free.token_ids[:first + 1] and out.finish_reason == "stop" and out.stop_reason == stop_tok
    eos = generate(_model(eos_token_ids=(stop_tok,)), None, [[1, 2]], SamplingParams(max_tokens=20,
                                                                                    temperature=0))[0]
    assert eos.token_ids == free.token_ids[:first + 1] and eos.finish_reason == "stop" and eos.stop_reason is None
    ign = generate(_model(eos_token_ids=(stop_tok,)), None, [[1, 2]], SamplingParams(max_tokens=20, temperature=0,
                                                                                    ignore_eos=True))[0]
    assert ign.token_ids == free.token_ids and ign.finish_reason == "length"


def test_max_seq_len():
    m = _model(eos_token_ids=(), max_seq_len=12)
    out = generate(m, None, [[1] * 12, [1] * 11, [1] * 5], SamplingParams(max_tokens=50))
    assert [len(c.token_ids) for c in out] == [1, 1, 7]
    assert all(c.finish_reason == "length" for c in out)


def test_bad_requests_fail_alone(alone):
    m = _model(max_seq_len=64)
    prompts = [PROMPTS[0], [], [1] * 65, [3, VOCAB], [3, -1], PROMPTS[1], "text without tokenizer", [1, 2],
               {"nothing": 1}, PROMPTS[2]]
    params = [PARAMS[0], None, None, None, None, PARAMS[1], None, {"max_tokenz": 3}, None, PARAMS[2]]
    ids = [IDS[0], "e1", "e2", "e3", "e4", IDS[1], "e6", "e7", "e8", IDS[2]]
    out = generate(m, None, prompts, params, request_ids=ids)
    errors = [str(c.error) if c.error else None for c in out]
    assert "empty prompt" in errors[1]
    assert "65 tokens, longer than max_seq_len 64" in errors[2]
    assert f"token id {VOCAB} outside the vocabulary" in errors[3] and "token id -1" in errors[4]
    assert "needs a tokenizer" in errors[6] and "unknown sampling parameter 'max_tokenz'" in errors[7]
    assert "'prompt' or 'prompt_token_ids'" in errors[8]
    assert all(f"'{ids[i]}'" in errors[i] for i in (1, 2, 3, 4, 6, 7, 8))
    for i, j in ((0, 0), (5, 1), (9, 2)):
        assert _key(out[i]) == _key(alone[j])
    assert all(out[i].finish_reason is None for i in (1, 2, 3, 4, 6, 7, 8))


def test_request_larger_than_kv_cache_fails_alone():
    m = _model(num_blocks=5, block_size=4, eos_token_ids=())
    out = generate(m, None, [[1] * 30, [2, 3], [1] * 15], SamplingParams(max_tokens=8))
    assert "KV cache budget is too small" in str(out[0].error)
    assert out[1].error is None and len(out[1].token_ids) == 8
    assert "KV cache budget is too small" in str(out[2].error)     # fits its prompt, not its generation
    assert not m.live and m.used == 0


def _ref_score(tokens):
    rows = _model().reference_logits(tokens)
    return [float(log_softmax(rows[i])[tokens[i + 1]]) for i in range(len(tokens) - 1)]


@pytest.mark.parametrize("cfg, blocks", [(SchedulerConfig(), 10_000),
                                         (SchedulerConfig(max_num_batched_tokens=5, prefill_chunk_size=2), 10_000),
                                         (SchedulerConfig(max_num_batched_tokens=32), 14)])
def test_score_matches_reference(cfg, blocks):
    prompts = PROMPTS[:20]
    out = score(_model(num_blocks=blocks), None, prompts, cfg)
    for p, s in zip(prompts, out):
        ref = _ref_score(p)
        assert s.error is None and s.token_logprobs == ref and s.num_tokens == len(p)
        assert s.total_logprob == float(np.sum(ref, dtype=np.float64))
    bad = score(_model(), None, [[], [1, 2]])
    assert "empty prompt" in str(bad[0].error) and bad[1].token_logprobs == _ref_score([1, 2])


def test_generate_and_score_in_one_scheduler(alone):
    reqs = []
    for i in range(10):
        reqs += [("generate", PROMPTS[i], PARAMS[i], IDS[i]), ("score", PROMPTS[i], None, f"s{i}")]
    res = run_all(_model(num_blocks=20), SchedulerConfig(max_num_batched_tokens=10, prefill_chunk_size=4), reqs)
    for i in range(10):
        assert _key(res[2 * i]) == _key(alone[i])
        assert res[2 * i + 1].token_logprobs == _ref_score(PROMPTS[i])


def test_a_raising_callback_releases_every_sequence():
    m = _model(num_blocks=40)

    def boom(event):
        if event.index == 3:
            raise RuntimeError("client went away")
    with pytest.raises(RuntimeError, match="client went away"):
        generate(m, None, PROMPTS[:10], PARAMS[:10], SchedulerConfig(max_num_batched_tokens=16), on_token=boom)
    assert not m.live and m.used == 0
    again = generate(m, None, PROMPTS[:2], PARAMS[:2], request_ids=IDS[:2])     # the model is still usable
    assert all(c.error is None for c in again)


def test_step_stats_and_request_metrics():
    steps = []
    out = generate(_model(), None, PROMPTS[:20], PARAMS[:20], SchedulerConfig(max_num_batched_tokens=24,
                                                                               prefill_chunk_size=6),
                   request_ids=IDS[:20], on_step=steps.append)
    assert sum(s.prefill_tokens for s in steps) == sum(len(p) for p in PROMPTS[:20])
    assert sum(s.decode_tokens for s in steps) == sum(len(c.token_ids) - 1 for c in out)
    assert sum(s.finished for s in steps) == 20 and steps[-1].running == steps[-1].waiting == 0
    assert all(s.prefill_tokens + s.decode_tokens <= 24 and s.t_end >= s.t_start for s in steps)
    for c in out:
        m = c.metrics
        assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finished_time
        assert m.time_to_first_token >= 0 and m.latency >= m.time_to_first_token and m.preemptions == 0
    tight = []
    eng = LLMEngine(_model(num_blocks=16, block_size=4), None, SchedulerConfig(max_num_batched_tokens=64))
    res = run_all(None, None, [("generate", p, sp, rid) for p, sp, rid in zip(PROMPTS, PARAMS, IDS)], engine=eng,
                  on_step=tight.append)
    preempted = eng.scheduler.stats["preemptions"]
    assert sum(c.metrics.preemptions for c in res) == preempted == sum(s.preemptions for s in tight)
    assert min(s.free_blocks for s in tight) >= 0 and max(s.running for s in tight) <= 16
    sc = score(_model(), None, PROMPTS[:3], on_step=tight.append)
    assert all(s.metrics.first_token_time is None and s.metrics.latency >= 0 for s in sc)


class _PoisonedModel(FakeStepModel):
    """Sequences starting with token 96 get NaN logits everywhere, with 95 a +inf in every row;
    with 94 only position 1 is NaN (mid-prompt, never sampled from)."""

    def forward(self, steps):
        starts = [len(seq.tokens) for seq, _, _ in steps]
        outs = super().forward(steps)
        for (seq, toks, want_all), out, start in zip(steps, outs, starts):
            first = seq.tokens[0]
            positions = range(start, start + len(toks)) if want_all else [start + len(toks) - 1]
            for row, pos in zip(out, positions):
                if first == 96:
                    row[:] = np.nan
                elif first == 95:
                    row[3] = np.inf
                elif first == 94 and pos == 1:
                    row[:] = np.nan
        return outs


def test_non_finite_logits_fail_only_their_request(alone):
    assert all(PROMPTS[i][0] < 94 for i in range(3))
    prompts = [PROMPTS[0], [96, 6, 7], PROMPTS[1], [95, 14], PROMPTS[2], [94, 13, 2]]
    params = [PARAMS[0], SamplingParams(max_tokens=4), PARAMS[1], SamplingParams(max_tokens=4, temperature=0.9),
              PARAMS[2], SamplingParams()]
    ids = [IDS[0], "nan", IDS[1], "inf", IDS[2], "mid"]
    m = _PoisonedModel(vocab_size=VOCAB, eos_token_ids=(5,), eos_boost=2.0)
    out = generate(m, None, prompts, params, SchedulerConfig(max_num_batched_tokens=9), request_ids=ids)
    assert [_key(out[i]) for i in (0, 2, 4)] == [_key(alone[i]) for i in (0, 1, 2)]
    assert "'nan': the model's logits are not finite" in str(out[1].error) and out[1].token_ids == []
    assert "'inf'" in str(out[3].error) and "not finite" in str(out[3].error)
    assert out[5].error is None                # position 1 is mid-prompt: never sampled from
    s = score(_PoisonedModel(vocab_size=VOCAB), None, [[94, 13, 2], [1, 2, 3], [95, 3]], request_ids=["p", "q", "r"])
    assert "'p'" in str(s[0].error) and "position 1" in str(s[0].error) and s[1].error is None
    assert "'r'" in str(s[2].error)
    assert not m.live and m.used == 0


def test_long_vocabulary_sampling_is_batch_invariant():
    """Rows past the sampler's LONG_ROW take its binned top-p / blocked CDF path (and a reused
    workspace): a request's tokens are the same alone or among 11 others, with penalties and min_p."""
    from colibri_dist.generate.sampler import LONG_ROW
    vocab = LONG_ROW + 1000
    rng = np.random.default_rng(3)
    prompts = [[int(t) for t in rng.integers(0, vocab, int(rng.integers(1, 9)))] for _ in range(12)]
    params = [SamplingParams(max_tokens=6, temperature=[0.7, 1.0, 1.5][i % 3], top_p=[0.9, 0.5, 1.0, 0.99][i % 4],
                             min_p=0.02 if i % 5 == 0 else 0.0, repetition_penalty=1.2 if i % 2 else 1.0,
                             frequency_penalty=0.3 if i % 3 == 1 else 0.0, seed=i, logprobs=1) for i in range(12)]
    ids = [f"long-{i}" for i in range(12)]
    alone = [_run([p], [sp], [rid], vocab_size=vocab)[0][0] for p, sp, rid in zip(prompts, params, ids)]
    together, _ = _run(prompts, params, ids, vocab_size=vocab)
    assert [_key(c) for c in together] == [_key(c) for c in alone]
    assert len({t for c in alone for t in c.token_ids}) > 12            # it sampled, not argmax alone


def test_engine_step_is_schedule_then_update():
    """The split step (issue 30): LLMEngine.step() = the scheduler's schedule(), the model call on
    plan.model_inputs(), its update(); a scheduler driven that way by hand gives the engine's outputs bit for
    bit, with every plan's batch under the budgets and its decode / prefill counts adding up to its tokens."""
    from colibri_dist.generate.request import Request
    from colibri_dist.generate.sampler import Sampler
    from colibri_dist.generate.scheduler import Scheduler
    cfg = SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=3)
    prompts, params = _mixed_requests(7, seed=4)

    def by_hand():
        model = FakeStepModel(vocab_size=VOCAB)
        sch = Scheduler(model, cfg)
        reqs = [Request(i, i, "generate", p, q, Sampler(q, 0, i)) for i, (p, q) in enumerate(zip(prompts, params))]
        for r in reqs:
            sch.add(r)
        while sch.has_work():
            plan = sch.schedule()
            assert sum(n for _, n in plan.batch) == plan.decode + plan.prefill <= 16 and len(plan.batch) <= 3
            sch.update(plan, model.forward(plan.model_inputs()) if plan.batch else [])
        return [(r.output, r.finish_reason) for r in reqs], model.calls

    def engine():
        model = FakeStepModel(vocab_size=VOCAB)
        eng = LLMEngine(model, scheduler_config=cfg)
        for i, (p, q) in enumerate(zip(prompts, params)):
            eng.add_request(i, p, q)
        done = {o.request_id: o.outputs[0] for o in eng.stream() if o.finished}
        return [(done[i].token_ids, done[i].finish_reason) for i in range(len(prompts))], model.calls
    hand, eng = by_hand(), engine()
    assert hand == eng and len(hand[1]) > 7                 # the same tokens and the same batches
