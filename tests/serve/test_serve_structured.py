"""Structured outputs on the server (issue 33) with the real `openai` client on loopback: parse() with a
Pydantic model returns a parsed object, response_format json_schema / json_object and vLLM's
structured_outputs (regex, choice) match, a stream is the same bits, the answers equal LLM.generate's,
and a schema / regex that does not compile is a 400 naming the field before anything runs."""
import json
import re

import pytest

import colibri_dist as cd
from colibri_dist.testing import random_llm

from serve_helpers import start_server

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
pytest.importorskip("llguidance")


class Person(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")     # additionalProperties false: a closed object
    name: str = pydantic.Field(max_length=8)
    age: int = pydantic.Field(ge=0, le=120)
    city: str = pydantic.Field(max_length=6)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return random_llm.build(tmp_path_factory.mktemp("serve-structured") / "m.colibri")


@pytest.fixture(scope="module")
def server(model):
    s = start_server(model, served_model_name=("rand",), disable_any_whitespace=True)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def _chat(i):
    return [{"role": "user", "content": f"person {i}"}]


def test_parse_with_a_pydantic_model(client):
    for seed in range(6):
        r = client.chat.completions.parse(model="rand", messages=_chat(seed), response_format=Person,
                                          temperature=1.0, seed=seed, max_tokens=300)
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "stop"
        assert isinstance(msg.parsed, Person) and msg.parsed == Person.model_validate_json(msg.content)


def test_json_schema_equals_llm_generate_and_stream(client, model):
    schema = Person.model_json_schema()
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
    r = client.chat.completions.create(model="rand", messages=_chat(9), response_format=fmt, temperature=1.0,
                                       seed=9, max_tokens=300)
    chunks = client.chat.completions.create(model="rand", messages=_chat(9), response_format=fmt, temperature=1.0,
                                            seed=9, max_tokens=300, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    with cd.LLM(model) as llm:
        want = llm.chat([_chat(9)], cd.SamplingParams(temperature=1.0, seed=9, max_tokens=300, structured_outputs={
            "json": schema, "disable_any_whitespace": True}))[0].outputs[0].text
    assert r.choices[0].message.content == streamed == want
    Person.model_validate_json(want)


def test_json_object_regex_and_choice(client):
    r = client.chat.completions.create(model="rand", messages=_chat(1), response_format={"type": "json_object"},
                                       temperature=1.0, seed=4, max_tokens=200)
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    r = client.completions.create(model="rand", prompt="id:", max_tokens=20, temperature=1.0, seed=2,
                                  extra_body={"structured_outputs": {"regex": r"[A-Z]{2}-[0-9]{4}"}})
    assert re.fullmatch(r"[A-Z]{2}-[0-9]{4}", r.choices[0].text)
    r = client.chat.completions.create(model="rand", messages=_chat(2), max_tokens=20, temperature=1.0, seed=3,
                                       extra_body={"structured_outputs": {"choice": ["red", "green", "blue"]}})
    assert r.choices[0].message.content in ("red", "green", "blue")


@pytest.mark.parametrize("extra, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
     "structured_outputs.json"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "bad name!", "schema": {}}}},
     "response_format.json_schema.name"),
    ({"structured_outputs": {"regex": "a(b"}}, "structured_outputs.regex"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
    ({"structured_outputs": {"regex": "a"}, "response_format": {"type": "json_object"}}, "response_format"),
])
def test_bad_constraints_are_400_naming_the_field(client, extra, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="rand", messages=_chat(0), max_tokens=5, extra_body=extra)
    assert e.value.body["param"] == param, e.value.body
    with pytest.raises(openai.BadRequestError) as e:       # the same body streamed: refused before the stream
        client.chat.completions.create(model="rand", messages=_chat(0), max_tokens=5, extra_body=extra, stream=True)
    assert e.value.body["param"] == param


def test_a_slow_compile_runs_off_the_event_loop(server, client):
    """A 3,000-property schema takes seconds to compile: /health answers while it does (the compile runs on
    a worker thread, the engine's on its compile thread), and the request then completes."""
    import threading
    import urllib.request
    props = {f"p{i}": {"anyOf": [{"type": "string", "pattern": "[a-z]{1,50}x"}, {"type": "integer"}]}
             for i in range(3000)}
    fmt = {"type": "json_schema", "json_schema": {"name": "big", "schema": {"type": "object", "properties": props}}}
    done, health = [], []
    t = threading.Thread(target=lambda: done.append(client.chat.completions.create(
        model="rand", messages=_chat(5), response_format=fmt, max_tokens=4, temperature=1.0, seed=1)))
    t.start()
    while t.is_alive():
        with urllib.request.urlopen(server.url + "/health", timeout=30) as r:
            health.append((r.status, bool(done)))
    t.join()
    # it may run out of llguidance's per-step fuel: then it ends with the named reason, never hangs
    c = done[0].choices[0]
    assert c.finish_reason in ("length", "stop") or (c.finish_reason == "grammar_dead_end" and "structured_outputs" in c.stop_reason)
    assert (200, False) in health                      # answered while the big request was still compiling
