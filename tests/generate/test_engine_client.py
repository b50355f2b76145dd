"""The engine client's in-process implementation (generate/client.py InProcessClient): each request gets what its
output_kind asked (DELTA pieces that join to the request's answer alone, FINAL_ONLY one finished output), an
aborted request yields nothing more and leaves the engine empty, a bad request raises at submit and leaves nothing
open, `running` is the scheduler's FIFO admission, and an engine that loses an open request is an error."""
import numpy as np
import pytest

from colibri_dist.errors import ColibriError, InvalidArgument
from colibri_dist.generate import LLMEngine, SamplingParams
from colibri_dist.generate.client import DELTA, FINAL_ONLY, InProcessClient, requests_fitting

from gen_fake_model import FakeStepModel

VOCAB = 97


def _prompt(i):
    return [int(t) for t in np.random.default_rng(i).integers(0, VOCAB, 5 + i)]


def _params(i):
    return SamplingParams(max_tokens=7 + i, temperature=0.8, seed=i, logprobs=1, ignore_eos=True)


def _alone(i):
    eng = LLMEngine(FakeStepModel(vocab_size=VOCAB))
    eng.add_request("x", _prompt(i), _params(i))
    return [o for o in eng.stream() if o.finished][0].outputs[0]


def _drain(client):
    got = {}
    while client.open:
        for out in client.poll(0.01):
            got.setdefault(out.request_id, []).append(out)
    return got


def test_deltas_join_to_the_answer_and_final_only_comes_once():
    client = InProcessClient(LLMEngine(FakeStepModel(vocab_size=VOCAB)))
    client.submit("d", _prompt(1), _params(1), output_kind=DELTA)
    client.submit("f", _prompt(2), _params(2), output_kind=FINAL_ONLY)
    got = _drain(client)
    d, f = got["d"], got["f"]
    assert len(d) == 8 and [o.finished for o in d] == [False] * 7 + [True]
    want = _alone(1)
    assert sum((o.outputs[0].token_ids for o in d), []) == want.token_ids
    assert sum((o.outputs[0].logprobs for o in d), []) == want.logprobs
    assert len(f) == 1 and f[0].finished and f[0].outputs[0].token_ids == _alone(2).token_ids
    assert client.poll() == [] and not client.engine.has_unfinished()


def test_an_aborted_request_yields_nothing_more_and_frees_the_engine():
    client = InProcessClient(LLMEngine(FakeStepModel(vocab_size=VOCAB)))
    client.submit("a", _prompt(3), _params(3))
    client.submit("b", _prompt(4), _params(4))
    first = client.poll()
    assert {o.request_id for o in first} == {"a", "b"}
    assert client.abort("a") and not client.abort("nope")
    got = _drain(client)
    assert all(o.request_id == "a" and o.outputs[0].finish_reason == "abort" for o in got.get("a", []))
    assert got["b"][-1].finished and not client.engine.has_unfinished()


def test_a_bad_request_raises_at_submit_and_stays_closed():
    client = InProcessClient(LLMEngine(FakeStepModel(vocab_size=VOCAB)))
    with pytest.raises(InvalidArgument, match="'bad'"):
        client.submit("bad", [VOCAB + 5], _params(0))
    assert client.open == set() and client.poll() == []


def test_an_engine_that_drops_an_open_request_is_an_error():
    eng = LLMEngine(FakeStepModel(vocab_size=VOCAB))
    client = InProcessClient(eng)
    client.submit("a", _prompt(5), _params(5))
    eng.abort("a")                                   # behind the client's back
    eng.step()
    with pytest.raises(ColibriError, match="without requests"):
        client.poll()


def test_running_counts_requests_by_their_samples_in_order():
    client = InProcessClient(None)
    assert client.running([("a", 2), ("b", 2), ("c", 1)], 4) == 2
    assert client.running([("a", 4), ("b", 2)], 4) == 1 and client.running([("a", 9)], 4) == 1
    assert requests_fitting([], 4) == 0
