"""One request's fault stays that request's (issue 31, defect 1): token-id parameters are checked against the
vocabulary when the request is added (a stop_token_ids id >= vocab with min_tokens > 0 used to raise
IndexError inside the shared step and fail every request of the batch), and a fault while sampling one
request fails that request alone; its neighbours finish with the bits they have alone."""
import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import LLMEngine, SamplingParams
from colibri_dist.generate.request import Request

from gen_fake_model import FakeStepModel

VOCAB = 97


def _params(seed):
    return SamplingParams(max_tokens=8, temperature=0.9, seed=seed, logprobs=2, ignore_eos=True)


def _prompt(i):
    return [int(t) for t in np.random.default_rng(i).integers(0, VOCAB, 5 + i)]


def _key(out):
    return [(c.token_ids, c.logprobs, c.finish_reason) for c in out.outputs]


@pytest.mark.parametrize("name", ["stop_token_ids", "allowed_token_ids"])
def test_a_token_id_parameter_outside_the_vocabulary_is_refused_at_add_naming_it(name):
    eng = LLMEngine(FakeStepModel(vocab_size=VOCAB))
    with pytest.raises(InvalidArgument, match=f"SamplingParams.{name}: {VOCAB + 5} is outside") as info:
        eng.add_request("r", [1, 2, 3], SamplingParams(max_tokens=4, min_tokens=2, **{name: [3, VOCAB + 5]}))
    assert (info.value.parameter, info.value.value) == (name, VOCAB + 5)
    assert not eng.has_unfinished()


def test_a_fault_while_sampling_one_request_fails_it_alone(monkeypatch):
    alone = {}
    for i in (0, 2):
        eng = LLMEngine(FakeStepModel(vocab_size=VOCAB))
        eng.add_request(f"r{i}", _prompt(i), _params(i))
        alone[i] = [o for o in eng.stream() if o.finished][0]
    real = Request.advance

    def advance(self, n, logits, model, on_token=None):
        if self.request_id == "r1" and self.output:
            raise IndexError("index 102 is out of bounds for axis 0 with size 97")
        return real(self, n, logits, model, on_token)
    monkeypatch.setattr(Request, "advance", advance)
    model = FakeStepModel(vocab_size=VOCAB)
    eng = LLMEngine(model)
    for i in range(3):
        eng.add_request(f"r{i}", _prompt(i), _params(i))
    done = {o.request_id: o for o in eng.stream() if o.finished}
    assert "index 102 is out of bounds" in str(done["r1"].error) and "'r1'" in str(done["r1"].error)
    for i in (0, 2):
        assert done[f"r{i}"].error is None and _key(done[f"r{i}"]) == _key(alone[i])
    assert not model.live and model.used == 0                     # the failed request's KV blocks are back
