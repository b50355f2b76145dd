"""SamplingParams validation and from_dict."""
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import SamplingParams


def test_defaults_are_vllm_defaults():
    p = SamplingParams()
    assert (p.max_tokens, p.temperature, p.top_p, p.top_k, p.seed, p.stop, p.stop_token_ids, p.ignore_eos,
            p.logprobs) == (16, 0.0, 1.0, 0, None, (), (), False, 0)
    assert p.greedy


@pytest.mark.parametrize("kwargs, field", [
    ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 2.5}, "max_tokens"), ({"max_tokens": True}, "max_tokens"),
    ({"temperature": -0.1}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"temperature": "hot"}, "temperature"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
    ({"top_k": -2}, "top_k"), ({"seed": -1}, "seed"), ({"seed": 1.0}, "seed"), ({"stop": 5}, "stop"),
    ({"stop": [""]}, "stop"), ({"stop": ["a", 3]}, "stop"), ({"stop_token_ids": 3}, "stop_token_ids"),
    ({"stop_token_ids": [-1]}, "stop_token_ids"), ({"ignore_eos": 1}, "ignore_eos"), ({"logprobs": -1}, "logprobs"),
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
