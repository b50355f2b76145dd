"""LLMEngine: requests added and aborted while others run, from other threads too; outputs per step;
every request's tokens and logprobs equal to what it produces alone."""
import threading

import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import LLMEngine, RequestOutput, RequestOutputKind, SamplingParams, SchedulerConfig

from gen_fake_model import FakeStepModel
from gen_tokenizers import word_level

VOCAB = 97


def _model(**kw):
    return FakeStepModel(vocab_size=VOCAB, **kw)


def _prompt(i, n=None):
    rng = np.random.default_rng(i)
    return [int(t) for t in rng.integers(0, VOCAB, n or int(rng.integers(2, 30)))]


def _params(i):
    if i % 2:
        return SamplingParams(max_tokens=6 + i % 7, temperature=0.0, logprobs=2, ignore_eos=True)
    return SamplingParams(max_tokens=6 + i % 5, temperature=0.9, top_p=0.9, seed=i, logprobs=1, ignore_eos=True)


def _key(out):
    return [(c.token_ids, c.logprobs, c.cumulative_logprob, c.finish_reason) for c in out.outputs]


def _alone(i):
    eng = LLMEngine(_model())
    eng.add_request(f"r{i}", _prompt(i), _params(i))
    return [o for o in eng.stream() if o.finished][0]


def test_step_outputs_are_cumulative_and_finish_once():
    eng = LLMEngine(_model())
    eng.add_request("a", [1, 2, 3], SamplingParams(max_tokens=4, temperature=0, logprobs=0))
    assert eng.has_unfinished() and eng.get_num_unfinished_requests() == 1
    seen = []
    while eng.has_unfinished():
        seen += eng.step()
    assert [len(o.outputs[0].token_ids) for o in seen] == [1, 2, 3, 4]
    assert [o.finished for o in seen] == [False, False, False, True]
    assert all(seen[k].token_ids == seen[-1].token_ids[:k + 1] for k in range(4))
    last = seen[-1]
    assert isinstance(last, RequestOutput) and last.request_id == "a" and last.prompt_token_ids == [1, 2, 3]
    assert last.outputs[0].index == 0 and last.finish_reason == "length" and len(last.logprobs) == 4
    assert eng.step() == [] and not eng.has_unfinished()


def test_requests_joining_midway_and_aborted_neighbours_keep_their_bits():
    """A request joins a running batch of 63 others at its 3rd step; neighbours are aborted around it."""
    ids = list(range(64))
    alone = {i: _alone(i) for i in (0, 5, 63)}
    m = _model(num_blocks=10_000)
    eng = LLMEngine(m, None, SchedulerConfig(max_num_batched_tokens=96, prefill_chunk_size=7))
    for i in ids[:63]:
        eng.add_request(f"r{i}", _prompt(i), _params(i))
    done, step = {}, 0
    while eng.has_unfinished():
        step += 1
        if step == 3:
            eng.add_request("r63", _prompt(63), _params(63))
        if step == 4:
            for i in (4, 6, 62):
                assert eng.abort(f"r{i}")
        for out in eng.step():
            if out.finished:
                done[out.request_id] = out
    for i in (0, 5, 63):
        assert _key(done[f"r{i}"]) == _key(alone[i])
    for i in (4, 6, 62):
        assert done[f"r{i}"].finished and done[f"r{i}"].finish_reason == "abort"
    assert len(done) == 64 and not m.live and m.used == 0


def test_abort_frees_blocks_at_once_and_unknown_ids():
    m = _model()
    eng = LLMEngine(m)
    eng.add_request("x", _prompt(1, 20), SamplingParams(max_tokens=50, ignore_eos=True))
    eng.add_request("y", _prompt(2, 20), SamplingParams(max_tokens=50, ignore_eos=True))
    eng.step()
    held = m.used
    assert held > 0 and eng.abort("x") and m.used < held       # freed now, not at the next step
    assert not eng.abort("x") and not eng.abort("nope")
    outs = eng.step()
    assert outs[0].request_id == "x" and outs[0].finished and outs[0].finish_reason == "abort"
    assert [o.request_id for o in outs[1:]] == ["y"]
    eng.abort("y")
    assert m.used == 0 and not m.live and eng.has_unfinished()           # y's final output is still due
    assert [(o.request_id, o.finish_reason) for o in eng.step()] == [("y", "abort")]
    eng.add_request("q", [1], SamplingParams(max_tokens=2))    # queued, aborted before it ever ran
    assert eng.abort("q") and [o.finish_reason for o in eng.step()] == ["abort"] and not eng.has_unfinished()


def test_bad_requests_raise_naming_the_request():
    eng = LLMEngine(_model(max_seq_len=40), word_level())
    eng.add_request("a", [1, 2], None)
    cases = [("a", [1], None, "already running"), ("b", [], None, "'b': empty prompt"),
             ("c", [1] * 41, None, "longer than max_seq_len 40"), ("d", [VOCAB], None, "outside the vocabulary"),
             ("e", [1], {"n": 0}, "'e': SamplingParams.n"), ("f", [1], {"max_tokenz": 1}, "'max_tokenz'"),
             ("g", [1], {"allowed_token_ids": [VOCAB + 5]}, "allowed_token_ids"), ("h", 3.5, None, "'h'"),
             ("i", [1], "greedy", "'i': sampling_params must be")]
    for rid, prompt, params, msg in cases:
        with pytest.raises(InvalidArgument, match=msg):
            eng.add_request(rid, prompt, params)
    with pytest.raises(InvalidArgument, match="kind must be one of"):
        eng.add_request("k", [1], None, kind="embed")
    with pytest.raises(InvalidArgument, match="bad_words needs the model's tokenizer"):
        LLMEngine(_model()).add_request("w", [1], {"bad_words": ["one"]})
    assert eng.get_num_unfinished_requests() == 1


def test_adds_and_aborts_from_another_thread_while_one_thread_steps():
    alone = {i: _alone(i) for i in range(0, 24, 3)}
    m = _model()
    eng = LLMEngine(m, None, SchedulerConfig(max_num_batched_tokens=40))
    eng.add_request("r0", _prompt(0), _params(0))
    done, started = {}, threading.Event()

    def client():
        started.wait()
        for i in range(1, 24):
            eng.add_request(f"r{i}", _prompt(i), _params(i))
            if i % 3 == 1:
                eng.abort(f"r{i}")
    t = threading.Thread(target=client)
    t.start()
    while True:
        alive = t.is_alive()            # read before has_unfinished: a client that ends between
        if not alive and not eng.has_unfinished():   # the two reads has added all it will add
            break
        started.set()
        for out in eng.step():
            if out.finished:
                done[out.request_id] = out
    t.join()
    assert len(done) == 24 and not m.live and m.used == 0
    for i, ref in alone.items():
        assert _key(done[f"r{i}"]) == _key(ref)
    assert all(done[f"r{i}"].finish_reason in ("abort", "length") for i in range(1, 24, 3))


def test_n_samples_share_the_prompt_and_sample_0_is_n_1():
    sp = SamplingParams(max_tokens=8, temperature=1.0, seed=7, logprobs=1, ignore_eos=True)
    eng = LLMEngine(_model())
    eng.add_request("one", [4, 5, 6], sp)
    eng.add_request("four", [4, 5, 6], SamplingParams(**dict(sp.to_dict(), n=4)))
    outs = {o.request_id: o for o in eng.stream() if o.finished}
    four = outs["four"].outputs
    assert [c.index for c in four] == [0, 1, 2, 3] and four[0].token_ids == outs["one"].token_ids
    assert len({tuple(c.token_ids) for c in four}) == 4
    greedy = LLMEngine(_model())
    greedy.add_request("g", [4, 5, 6], SamplingParams(max_tokens=5, temperature=0, n=3))
    g = [o for o in greedy.stream() if o.finished][0]
    assert len({tuple(c.token_ids) for c in g.outputs}) == 1


def test_prompt_logprobs_equal_score_and_kinds():
    p = _prompt(9, 12)
    eng = LLMEngine(_model())
    eng.add_request("s", p, kind="score")
    eng.add_request("g", p, SamplingParams(max_tokens=1, prompt_logprobs=3))
    outs = {o.request_id: o for o in eng.stream() if o.finished}
    s, g = outs["s"], outs["g"]
    assert s.outputs == [] and s.prompt_logprobs[0] is None and g.prompt_logprobs[0] is None
    assert [x.logprob for x in s.prompt_logprobs[1:]] == [x.logprob for x in g.prompt_logprobs[1:]]
    assert len(s.prompt_logprobs) == len(p) and all(len(x.top) == 3 for x in g.prompt_logprobs[1:])
    for pos, lp in enumerate(g.prompt_logprobs[1:], 1):      # vLLM's dict[token_id, Logprob] view
        assert lp[p[pos]].logprob == lp.logprob and lp[p[pos]].rank == lp.rank and p[pos] in lp


def test_stream_iterator_and_exception_frees_everything():
    m = _model()
    eng = LLMEngine(m)
    for i in range(5):
        eng.add_request(i, _prompt(i), _params(i))
    finished = [o.request_id for o in eng.stream() if o.finished]
    assert sorted(finished) == list(range(5))

    def boom(ev):
        raise RuntimeError("callback failed")
    eng.add_request("z", [1, 2], SamplingParams(max_tokens=5))
    with pytest.raises(RuntimeError, match="callback failed"):
        eng.step(on_token=boom)
    assert not eng.has_unfinished() and not m.live and m.used == 0


def test_output_kinds_delta_and_final_only():
    tok = word_level()
    sp = dict(max_tokens=9, temperature=0.0, logprobs=1, ignore_eos=True, prompt_logprobs=1)
    eng = LLMEngine(FakeStepModel(vocab_size=tok.get_vocab_size()), tok)
    eng.add_request("c", "one two three", SamplingParams(**sp))
    eng.add_request("d", "one two three", SamplingParams(**sp, output_kind="delta"))
    eng.add_request("f", "one two three", SamplingParams(**sp, output_kind=RequestOutputKind.FINAL_ONLY))
    got = {"c": [], "d": [], "f": []}
    for out in eng.stream():
        got[out.request_id].append(out)
    cum, deltas, final = got["c"][-1], got["d"], got["f"]
    assert len(final) == 1 and final[0].finished and _key(final[0]) == _key(cum)
    assert len(deltas) == len(got["c"]) == 9 and [d.finished for d in deltas] == [False] * 8 + [True]
    assert "".join(d.outputs[0].text for d in deltas) == cum.outputs[0].text and cum.outputs[0].text
    assert sum((d.outputs[0].token_ids for d in deltas), []) == cum.outputs[0].token_ids
    assert sum((d.outputs[0].logprobs for d in deltas), []) == cum.outputs[0].logprobs
    assert deltas[-1].outputs[0].cumulative_logprob == cum.outputs[0].cumulative_logprob
    assert deltas[0].prompt_logprobs == cum.prompt_logprobs and deltas[1].prompt_logprobs == []
