"""Structured outputs (issue 33) through cd.LLM on random-weight models with a byte-level tokenizer:
200 random JSON schemas whose every output validates (jsonschema), regex / choice / grammar outputs that
match, constrained and unconstrained requests mixed in one batch each equal to their solo run bit for
bit, n > 1, and bad constraints named (a per-request error) or ending in a named finish reason."""
import json
import re

import pytest

import colibri_dist as cd
from colibri_dist.generate.grammar import DEAD_END
from colibri_dist.testing import random_llm
from colibri_dist.testing.schemas import schemas

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("structured")
    return [cd.LLM(random_llm.build(root / f"m{seed}.colibri", seed=seed)) for seed in (0, 1)]


def _params(so, seed, max_tokens=400, **kw):
    return cd.SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed, structured_outputs=so, **kw)


def test_200_random_schemas_validate(models):
    S = schemas(200, seed=7)
    for m, llm in enumerate(models):
        half = range(m * 100, m * 100 + 100)
        outs = llm.generate([f"row {i}" for i in half],
                            [_params({"json": S[i], "disable_any_whitespace": True}, i) for i in half])
        for i, out in zip(half, outs):
            c = out.outputs[0]
            assert c.finish_reason == "stop", (S[i], c.text)
            jsonschema.validate(json.loads(c.text), S[i])


def test_regex_choice_grammar_and_flexible_json(models):
    llm = models[0]
    cases = [({"regex": r"[0-9]{3}-[a-z]{2}"}, lambda t: re.fullmatch(r"[0-9]{3}-[a-z]{2}", t)),
             ({"choice": ["yes", "no", "maybe not"]}, lambda t: t in ("yes", "no", "maybe not")),
             ({"grammar": 'root ::= "x" [0-9] [0-9]? "y"'}, lambda t: re.fullmatch(r"x[0-9][0-9]?y", t)),
             ({"grammar": 'start: "a" ("," "b")*'}, lambda t: re.fullmatch(r"a(,b)*", t))]
    for so, ok in cases:
        outs = llm.generate([f"q{i}" for i in range(4)], [_params(so, i, max_tokens=120) for i in range(4)])
        for o in outs:
            assert o.error is None and ok(o.outputs[0].text), (so, o.outputs[0].text)
    # json_object (any keys, unbounded strings) and vLLM's default free whitespace between JSON tokens: a
    # random model may write until max_tokens; every output that stops is valid, and most stop
    sch = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"], "additionalProperties": False}
    for so, schema in (({"json_object": True, "disable_any_whitespace": True}, {"type": "object"}), ({"json": sch}, sch)):
        outs = [o.outputs[0] for o in llm.generate(["w"] * 6, [_params(so, i, max_tokens=120) for i in range(6)])]
        stopped = [c for c in outs if c.finish_reason == "stop"]
        assert len(stopped) >= 3, [c.text for c in outs]
        for c in stopped:
            jsonschema.validate(json.loads(c.text), schema)


def test_mixed_batch_equals_solo_runs(models):
    llm = models[1]
    S = schemas(6, seed=3)
    ps = [_params({"json": S[i], "disable_any_whitespace": True}, i) if i % 2 == 0 else
          cd.SamplingParams(max_tokens=24, temperature=1.0 if i % 3 else 0.0, seed=i) for i in range(6)]
    prompts = [f"mixed {i}" for i in range(6)]
    solo = [llm.generate([p], [q])[0].outputs[0] for p, q in zip(prompts, ps)]
    batch = llm.generate(prompts, ps)
    for s, b in zip(solo, batch):
        assert b.outputs[0].token_ids == s.token_ids and b.outputs[0].text == s.text
    unconstrained = llm.generate(prompts[1::2], ps[1::2])
    assert [o.outputs[0].token_ids for o in unconstrained] == [s.token_ids for s in solo[1::2]]


def test_n_samples_each_valid_and_sample0_is_n1(models):
    llm = models[0]
    sch = schemas(1, seed=11)[0]
    one = llm.generate(["n"], _params({"json": sch, "disable_any_whitespace": True}, 5))[0].outputs[0]
    many = llm.generate(["n"], _params({"json": sch, "disable_any_whitespace": True}, 5, n=3))[0].outputs
    assert many[0].token_ids == one.token_ids
    for c in many:
        jsonschema.validate(json.loads(c.text), sch)


@pytest.mark.parametrize("so, field", [({"json": {"type": "foo"}}, "structured_outputs.json"),
                                       ({"regex": "a(b"}, "structured_outputs.regex"),
                                       ({"grammar": "start: undefined_rule"}, "structured_outputs.grammar")])
def test_bad_constraint_fails_its_request_only(models, so, field):
    llm = models[0]
    both = (["bad", "good"], [_params(so, 1), cd.SamplingParams(max_tokens=4, temperature=0.0)])
    with pytest.raises(ValueError) as e:                    # vLLM's LLM: an invalid request raises
        llm.generate(*both)
    assert e.value.parameter == field and field in str(e.value)
    outs = llm.generate(*both, errors="return")             # the jobs' way: the error is that request's
    assert outs[0].error is not None and outs[0].error.parameter == field and field in str(outs[0].error)
    assert outs[1].error is None and len(outs[1].outputs[0].token_ids) == 4


def test_bad_shape_named_at_the_boundary():
    with pytest.raises(cd.InvalidArgument) as e:
        cd.SamplingParams(structured_outputs={"json": {"type": "object"}, "regex": "a"})
    assert e.value.parameter == "structured_outputs"
    with pytest.raises(cd.InvalidArgument) as e:
        cd.SamplingParams(structured_outputs={"choice": []})
    assert e.value.parameter == "structured_outputs.choice"
    with pytest.raises(cd.InvalidArgument) as e:
        cd.SamplingParams(structured_outputs={"jsn": {}})
    assert e.value.parameter == "structured_outputs.jsn"


def test_no_allowed_token_ends_with_a_named_reason(models):
    llm = models[0]
    out = llm.generate(["x"], _params({"choice": ["yes"]}, 1, allowed_token_ids=[5, 6]))[0]
    assert out.error is None and out.outputs[0].finish_reason == DEAD_END
    assert "allow no token" in out.outputs[0].stop_reason


def test_compile_is_cached_per_constraint(models):
    llm = models[1]
    sch = {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"]}
    llm.generate(["c"], _params({"json": sch, "disable_any_whitespace": True}, 1, max_tokens=40))
    grammars = llm.llm_engine._grammars
    before = grammars.compiles
    llm.generate(["c"] * 3, [_params({"json": sch, "disable_any_whitespace": True}, i, max_tokens=40)
                             for i in range(3)])
    assert grammars.compiles == before


@pytest.mark.parametrize("vocab", [8, 13, 380, 50257, 151936])
def test_apply_mask_equals_a_boolean_index(vocab):
    import numpy as np
    from colibri_dist.generate.grammar import apply_mask
    rng = np.random.default_rng(vocab)
    words = rng.integers(-2**31, 2**31 - 1, (vocab + 31) // 32, dtype=np.int64).astype(np.int32)
    x = rng.standard_normal(vocab).astype(np.float32)
    want = x.copy()
    want[~np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab].view(bool)] = -np.inf
    assert np.array_equal(apply_mask(x, words), want)


def test_start_after_leaves_the_output_free_until_its_text(models):
    llm = models[0]
    free = cd.SamplingParams(max_tokens=12, temperature=0.0)
    first = llm.generate(["think"], free)[0].outputs[0].token_ids
    tok = llm.tokenizer
    k = next(i for i, t in enumerate(first) if tok.encode(tok.decode([t]), add_special_tokens=False).ids == [t])
    marker = tok.decode([first[k]])                      # a token the free run writes, as start_after
    so = {"choice": ["alpha", "beta"], "start_after": marker}
    out = llm.generate(["think"], cd.SamplingParams(max_tokens=30, temperature=0.0, structured_outputs=so))[0]
    ids = out.outputs[0].token_ids
    assert ids[:k + 1] == first[:k + 1]                  # free (the same bits) up to and with the marker
    assert tok.decode(ids[k + 1:]) in ("alpha", "beta") and out.outputs[0].finish_reason == "stop"
    never = {"choice": ["alpha"], "start_after": "<tool_response>"}      # never written: never constrained
    same = llm.generate(["think"], cd.SamplingParams(max_tokens=12, temperature=0.0, structured_outputs=never))[0]
    assert same.outputs[0].token_ids == first
