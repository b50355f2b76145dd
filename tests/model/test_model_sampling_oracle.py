"""The new sampling fields against transformers on real converted tiny models: greedy decoding with
repetition_penalty / min_tokens equal to transformers' generate, and our logits processors equal to
transformers' RepetitionPenaltyLogitsProcessor / MinPLogitsWarper / MinNewTokensLengthLogitsProcessor
on the same logits rows (exact). presence/frequency penalties (OpenAI's / vLLM's, no transformers
processor) against their definition; n, prompt_logprobs against score and transformers."""
import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.generate import SamplingParams
from colibri_dist.generate.logits import Processors, min_p_mask

torch = pytest.importorskip("torch")
from transformers.generation.logits_process import (MinNewTokensLengthLogitsProcessor, MinPLogitsWarper,  # noqa: E402
                                                    RepetitionPenaltyLogitsProcessor)


def prompt(n, seed, vocab=97):
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


def _hf_greedy(hf, p, **kw):
    x = torch.tensor([p])
    with torch.no_grad():
        return hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, **kw)[0, len(p):].tolist()


@pytest.mark.parametrize("case", ["qwen3_moe", "mixtral"])
def test_greedy_with_repetition_penalty_matches_transformers(whole_model, case):
    path, hf = whole_model(case)
    prompts = [prompt(n, 40 + n) for n in (6, 21)]
    with cd.LLM(path) as llm:
        outs = llm.generate(prompts, SamplingParams(max_tokens=12, temperature=0, repetition_penalty=1.8,
                                                    ignore_eos=True))
        plain = llm.generate(prompts, SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))
    for p, out, base in zip(prompts, outs, plain):
        ref = _hf_greedy(hf, p, max_new_tokens=12, min_new_tokens=12, repetition_penalty=1.8)
        assert out.token_ids == ref
    assert any(o.token_ids != b.token_ids for o, b in zip(outs, plain))      # the penalty changed something


def test_greedy_with_min_tokens_matches_transformers(whole_model):
    path, hf = whole_model("qwen3_moe")
    p = prompt(9, 3)
    with cd.LLM(path) as llm:
        free = llm.generate([p], SamplingParams(max_tokens=10, temperature=0, ignore_eos=True))[0].token_ids
        stop = free[1]                                 # a token greedy decoding emits early
        out = llm.generate([p], SamplingParams(max_tokens=10, temperature=0, min_tokens=6, stop_token_ids=[stop]))[0]
        early = llm.generate([p], SamplingParams(max_tokens=10, temperature=0, stop_token_ids=[stop]))[0]
    ref = _hf_greedy(hf, p, max_new_tokens=10, min_new_tokens=6, eos_token_id=stop, pad_token_id=0)
    ref = ref[:ref.index(stop) + 1] if stop in ref else ref
    assert out.token_ids == ref and len(out.token_ids) >= 6 and stop not in out.token_ids[:6]
    assert early.token_ids == free[:free.index(stop) + 1] and early.finish_reason == "stop" and early.stop_reason == stop


@pytest.fixture(scope="module")
def rows(whole_model):
    path, _ = whole_model("qwen2_moe")
    p = prompt(30, 8)
    with cd.LLM(path) as llm:
        return p, llm.logits(p)


@pytest.mark.parametrize("penalty", [0.7, 1.3, 2.0])
def test_repetition_penalty_equals_transformers_processor(rows, penalty):
    p, logits = rows
    for cut in (5, 17, 29):                            # prompt = p[:cut], output so far = p[cut:]
        prompt_ids, output = p[:cut], p[cut:]
        procs = Processors(SamplingParams(repetition_penalty=penalty), prompt_ids)
        for t in output:
            procs.accept(t)
        row = logits[len(p) - 1]
        ref = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([p]), torch.from_numpy(row.copy())[None])[0]
        got = procs.apply(row, output)
        assert got.dtype == np.float32 and np.array_equal(got, ref.numpy())
        assert not np.array_equal(got, row)


@pytest.mark.parametrize("min_p, temperature", [(0.05, 1.0), (0.3, 0.7), (0.9, 1.5)])
def test_min_p_equals_transformers_warper(rows, min_p, temperature):
    _, logits = rows
    for row in logits[::7]:
        z = row / np.float32(temperature)
        ref = MinPLogitsWarper(min_p)(None, torch.from_numpy(z.copy())[None])[0].numpy()
        got = min_p_mask(z, min_p)
        assert np.array_equal(np.isinf(got), np.isinf(ref)) and np.array_equal(got[~np.isinf(got)],
                                                                                ref[~np.isinf(ref)])
        assert np.isinf(got).any() and not np.isinf(got).all()


def test_min_tokens_equals_transformers_processor(rows):
    p, logits = rows
    stops = [int(np.argmax(logits[-1])), 3]
    params = SamplingParams(min_tokens=4, stop_token_ids=[stops[0]])
    procs = Processors(params, p[:20], eos_token_ids=(stops[1],))
    hf = MinNewTokensLengthLogitsProcessor(20, 4, stops)
    for k in range(6):                                 # k tokens generated so far
        row = logits[20 + k]
        ref = hf(torch.tensor([p[:20 + k]]), torch.from_numpy(row.copy())[None])[0].numpy()
        assert np.array_equal(procs.apply(row, p[20:20 + k]), ref), k
        procs.accept(p[20 + k])
    assert procs.apply(logits[26], p[20:26]) is logits[26] or np.array_equal(procs.apply(logits[26], p[20:26]),
                                                                               logits[26])


def test_presence_and_frequency_penalties_follow_their_definition(rows):
    p, logits = rows
    output = p[10:30]
    procs = Processors(SamplingParams(presence_penalty=0.5, frequency_penalty=-0.25), p[:10])
    for t in output:
        procs.accept(t)
    row = logits[-1]
    ref = row.copy()
    for t in set(output):                              # OpenAI: logit - count * f - (count > 0) * p
        ref[t] = (ref[t] - np.float32(-0.25) * np.float32(output.count(t))) - np.float32(0.5)
    assert np.array_equal(procs.apply(row, output), ref)


def test_n_prompt_logprobs_and_vllm_shapes_on_a_real_model(whole_model):
    path, hf = whole_model("mixtral")
    p = prompt(14, 2)
    with cd.LLM(path) as llm:
        one = llm.generate([p], SamplingParams(max_tokens=6, seed=5, ignore_eos=True))[0]
        four = llm.generate([p], SamplingParams(n=4, max_tokens=6, seed=5, ignore_eos=True, logprobs=1,
                                                prompt_logprobs=2))[0]
        score = llm.score([p])[0]
    assert [c.index for c in four.outputs] == [0, 1, 2, 3] and four.outputs[0].token_ids == one.token_ids
    assert len({tuple(c.token_ids) for c in four.outputs}) > 1
    assert [lp.logprob for lp in four.prompt_logprobs[1:]] == score.token_logprobs
    with torch.no_grad():
        ref = torch.log_softmax(hf(torch.tensor([p])).logits[0].double(), -1).numpy()
    for i, lp in enumerate(four.prompt_logprobs[1:], 1):
        assert abs(lp.logprob - ref[i - 1, p[i]]) <= 1e-4
        assert [t for t, _ in lp.top] == np.argsort(-ref[i - 1], kind="stable")[:2].tolist()
    for c in four.outputs:
        assert c.cumulative_logprob == sum(lp.logprob for lp in c.logprobs) and c.finish_reason == "length"
        assert c.stop_reason is None and c.text == "" and len(c.token_ids) == 6
    assert four.finished and four.request_id == "1" and four.prompt is None and four.prompt_token_ids == p
    assert four.metrics.first_token_time >= four.metrics.arrival_time
