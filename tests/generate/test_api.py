"""generate/score entry points: prompt and params normalization, shapes of the call."""
import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import SamplingParams
from colibri_dist.generate.api import generate, score
from colibri_dist.generate.prompts import as_prompt_list

from gen_fake_model import FakeStepModel
from gen_tokenizers import word_level


def test_prompt_forms():
    assert as_prompt_list("a b") == ["a b"]
    assert as_prompt_list([1, 2, 3]) == [[1, 2, 3]]
    assert as_prompt_list(np.array([1, 2])) == [[1, 2]]
    assert as_prompt_list([[1, 2], "x", {"prompt": "y"}]) == [[1, 2], "x", {"prompt": "y"}]
    assert as_prompt_list([]) == []
    with pytest.raises(InvalidArgument, match="prompts must be"):
        as_prompt_list(3)


def test_equivalent_prompt_forms_give_equal_completions():
    tok = word_level()
    model = FakeStepModel(vocab_size=tok.get_vocab_size())
    ids = tok.encode("one two three").ids
    sp = SamplingParams(max_tokens=6, temperature=0.8, seed=1)
    forms = ["one two three", ids, {"prompt": "one two three"}, {"prompt_token_ids": ids}, np.array(ids)]
    outs = [generate(model, tok, f, sp)[0] for f in forms]
    assert all(o.token_ids == outs[0].token_ids and o.prompt_token_ids == ids for o in outs)
    assert outs[0].text == tok.decode(outs[0].token_ids)


def test_params_one_list_or_dicts():
    model = FakeStepModel()
    prompts = [[1, 2], [3, 4], [5]]
    one = generate(model, None, prompts, SamplingParams(max_tokens=3))
    as_dicts = generate(model, None, prompts, [{"max_tokens": 3}] * 3)
    assert [c.token_ids for c in one] == [c.token_ids for c in as_dicts]
    assert all(len(c.token_ids) == 3 for c in one)
    assert all(len(c.token_ids) == 16 for c in generate(model, None, prompts))     # vLLM default max_tokens
    with pytest.raises(InvalidArgument, match="2 sampling_params for 3 prompts"):
        generate(model, None, prompts, [None, None])
    with pytest.raises(InvalidArgument, match="sampling_params must be"):
        generate(model, None, prompts, "greedy")


def test_default_request_ids_are_vllm_strings_and_seed_derivation_uses_them():
    model = FakeStepModel()
    sp = SamplingParams(max_tokens=8, temperature=1.0)
    a = generate(model, None, [[1, 2], [1, 2]], sp)
    assert [c.request_id for c in a] == ["0", "1"] and a[0].token_ids != a[1].token_ids
    b = generate(model, None, [[1, 2], [3]], sp, request_ids=["x", "y"])
    c = generate(model, None, [[1, 2]], sp, request_ids=["x"])
    assert b[0].token_ids == c[0].token_ids != a[0].token_ids
    with pytest.raises(InvalidArgument, match="request ids must be unique"):     # vLLM: ids are unique
        generate(model, None, [[1, 2], [1, 2]], sp, request_ids=["x", "x"])


def test_score_text_prompts():
    tok = word_level()
    model = FakeStepModel(vocab_size=tok.get_vocab_size())
    s = score(model, tok, ["one two three", [4, 5]])
    assert s[0].prompt_token_ids == tok.encode("one two three").ids and len(s[0].token_logprobs) == 2
    assert s[1].num_tokens == 2 and s[0].total_logprob == pytest.approx(sum(s[0].token_logprobs))


def test_logprob_decoded_token_is_the_token_decoded_alone():
    """vLLM's Logprob.decoded_token: tokenizer.decode([id]) for the chosen and top tokens, sampled and
    prompt logprobs alike; None without a tokenizer."""
    tok = word_level()
    model = FakeStepModel(vocab_size=tok.get_vocab_size())
    sp = SamplingParams(max_tokens=3, temperature=0.8, seed=2, logprobs=2, prompt_logprobs=1)
    out = generate(model, tok, "one two three", sp)[0]
    entries = list(out.outputs[0].logprobs) + out.prompt_logprobs[1:]
    for e in entries:
        assert len(e) >= 2 and all(lp.decoded_token == tok.decode([t], skip_special_tokens=False)
                                   for t, lp in e.items())
    assert out.outputs[0].logprobs[0][out.token_ids[0]].decoded_token != ""
    bare = generate(model, None, [tok.encode("one two three").ids], sp)[0]
    assert all(lp.decoded_token is None for e in bare.outputs[0].logprobs for lp in e.values())
    assert [e.logprob for e in bare.outputs[0].logprobs] == [e.logprob for e in out.outputs[0].logprobs]
