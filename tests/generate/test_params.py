"""SamplingParams validation and from_dict."""
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import SamplingParams


def test_defaults_are_vllm_defaults():
    p = SamplingParams()
    assert (p.n, p.max_tokens, p.min_tokens, p.temperature, p.top_p, p.top_k, p.min_p, p.seed, p.stop,
            p.stop_token_ids, p.ignore_eos, p.logprobs, p.prompt_logprobs) == (
        1, 16, 0, 1.0, 1.0, 0, 0.0, None, (), (), False, None, None)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)
    assert (p.bad_words, p.allowed_token_ids, p.skip_special_tokens) == ((), None, True)
    assert not p.greedy and not p.penalized and SamplingParams(temperature=0).greedy


@pytest.mark.parametrize("kwargs, field", [
    ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 2.5}, "max_tokens"), ({"max_tokens": True}, "max_tokens"),
    ({"temperature": -0.1}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"temperature": "hot"}, "temperature"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
    ({"top_k": -2}, "top_k"), ({"seed": -1}, "seed"), ({"seed": 1.0}, "seed"), ({"stop": 5}, "stop"),
    ({"stop": [""]}, "stop"), ({"stop": ["a", 3]}, "stop"), ({"stop_token_ids": 3}, "stop_token_ids"),
    ({"stop_token_ids": [-1]}, "stop_token_ids"), ({"ignore_eos": 1}, "ignore_eos"), ({"logprobs": -1}, "logprobs"),
    ({"n": 0}, "n"), ({"n": 1.5}, "n"), ({"min_p": -0.1}, "min_p"), ({"min_p": 1.1}, "min_p"),
    ({"min_p": "x"}, "min_p"), ({"min_tokens": -1}, "min_tokens"), ({"min_tokens": 17}, "min_tokens"),
    ({"presence_penalty": 2.5}, "presence_penalty"), ({"presence_penalty": float("inf")}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"), ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": -1.0}, "repetition_penalty"), ({"repetition_penalty": 1e-300}, "repetition_penalty"),
    ({"repetition_penalty": 1e30}, "repetition_penalty"), ({"prompt_logprobs": -1}, "prompt_logprobs"),
    ({"prompt_logprobs": 0.5}, "prompt_logprobs"), ({"bad_words": [""]}, "bad_words"), ({"bad_words": 3}, "bad_words"),
    ({"allowed_token_ids": []}, "allowed_token_ids"), ({"allowed_token_ids": [1, -2]}, "allowed_token_ids"),
    ({"allowed_token_ids": "1"}, "allowed_token_ids"), ({"skip_special_tokens": "no"}, "skip_special_tokens"),
    ({"max_tokens": -5}, "max_tokens"), ({"output_kind": "stream"}, "output_kind"), ({"output_kind": 7}, "output_kind"),
])
def test_invalid_values_name_the_field(kwargs, field):
    with pytest.raises(InvalidArgument, match=f"SamplingParams.{field}"):
        SamplingParams(**kwargs)


def test_normalization():
    p = SamplingParams(stop="END", stop_token_ids=[7, 8], temperature=1, seed=3)
    assert p.stop == ("END",) and p.stop_token_ids == (7, 8) and p.temperature == 1.0 and not p.greedy
    assert SamplingParams(top_k=-1).top_k == -1


def test_from_dict():
    p = SamplingParams.from_dict({"max_tokens": 4, "temperature": 0.7, "stop": ["x"]})
    assert p == SamplingParams(max_tokens=4, temperature=0.7, stop=["x"])
    assert SamplingParams.from_dict(None) == SamplingParams()
    assert SamplingParams.from_dict(p) is p
    assert SamplingParams.from_dict(p.to_dict()) == p
    with pytest.raises(InvalidArgument, match="unknown sampling parameter 'max_new_tokens'"):
        SamplingParams.from_dict({"max_new_tokens": 3})
    with pytest.raises(InvalidArgument, match="must be a mapping"):
        SamplingParams.from_dict([1, 2])
    with pytest.raises(InvalidArgument, match="SamplingParams.top_p"):
        SamplingParams.from_dict({"top_p": 2})


def test_model_defaults_apply_to_dicts_and_none_only():
    from colibri_dist.generate.params import generation_defaults
    d = generation_defaults({"temperature": 0.7, "max_new_tokens": 5, "top_k": 20, "do_sample": True,
                             "repetition_penalty": 1.1, "eos_token_id": 2})
    assert d == {"temperature": 0.7, "max_tokens": 5, "top_k": 20, "repetition_penalty": 1.1}
    assert SamplingParams.from_dict(None, d) == SamplingParams(**d)
    assert SamplingParams.from_dict({"temperature": 0}, d) == SamplingParams(**dict(d, temperature=0))
    explicit = SamplingParams(max_tokens=3)
    assert SamplingParams.from_dict(explicit, d) is explicit          # vLLM: an explicit object is used as is
    with pytest.raises(InvalidArgument, match="generation_config.json: top_p: SamplingParams.top_p"):
        generation_defaults({"top_p": 0})
    with pytest.raises(InvalidArgument, match="x.json: max_new_tokens: SamplingParams.max_tokens"):
        generation_defaults({"max_new_tokens": 0}, where="x.json")
