"""Tool calling on /v1/chat/completions through the real `openai` client and a live server over the
random-weight model (testing/random_llm.py: Hermes-style tools template; its model_type, mixtral, has no
parser of its own, so the server is started with --tool-call-parser hermes).

The random model writes no tool calls of its own: the parsing path is driven by scripted text
(scripted.py stands in for the model's words behind the backend); the real model checks what reaches the
template, the 400s, auto without a call, and required / a named function, whose schemas the sampler
enforces (structured outputs; compact JSON, --disable-any-whitespace, so the random model's output ends).
"""
import json

import pytest

from colibri_dist.testing import random_llm

from scripted import recording, script
from serve_helpers import start_server

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]
STRICT_TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {}, "additionalProperties": False}}}
UNIT = {"type": "function", "function": {"name": "set_unit", "parameters": {
    "type": "object", "properties": {"unit": {"enum": ["c", "f"]}}, "required": ["unit"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "weather in Paris?"}]
CALLS = ('I will look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
         '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = random_llm.build(tmp_path_factory.mktemp("tools") / "m.colibri")
    s = start_server(path, served_model_name=("rnd",), tool_call_parser="hermes", disable_any_whitespace=True)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def post(server, path, body):
    return httpx.post(server.url + path, json=body, timeout=60)


def chat(client, **kw):
    return client.chat.completions.create(model="rnd", messages=kw.pop("messages", ASK), **kw)


def pieces(text, size=3):
    return [text[i:i + size] for i in range(0, len(text), size)]


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("extra,param", [
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "object"}}]}, "tools"),
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_stock"}}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": "{not json"}}]}]}, "messages"),
])
def test_bad_tool_fields_are_400_naming_the_field(server, extra, param):
    r = post(server, "/v1/chat/completions", {"model": "rnd", "messages": ASK, "max_tokens": 2, **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_auto_without_a_parser_is_refused_naming_tools(server, monkeypatch):
    monkeypatch.setattr(server.state, "tool_parser", None)         # what a mixtral model without the flag gets
    r = post(server, "/v1/chat/completions", {"model": "rnd", "messages": ASK, "tools": TOOLS, "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
    assert "--tool-call-parser" in r.json()["error"]["message"]


# ---------------------------------------------------------------- the template
def test_tools_reach_the_template(server, client):
    plain = post(server, "/tokenize", {"messages": ASK}).json()
    with_tools = post(server, "/tokenize", {"messages": ASK, "tools": TOOLS}).json()
    text = post(server, "/detokenize", {"tokens": with_tools["tokens"]}).json()["prompt"]
    assert with_tools["count"] > plain["count"]
    assert "# Tools" in text and json.dumps(WEATHER) in text
    a = chat(client, max_tokens=1, temperature=0)
    b = chat(client, max_tokens=1, temperature=0, tools=TOOLS)
    assert b.usage.prompt_tokens == with_tools["count"] and a.usage.prompt_tokens == plain["count"]


def test_tool_calls_and_tool_results_fed_back_render_through_the_template(server):
    convo = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    ids = post(server, "/tokenize", {"messages": convo, "tools": TOOLS}).json()["tokens"]
    text = post(server, "/detokenize", {"tokens": ids}).json()["prompt"]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in text


def test_a_conversation_with_tool_results_generates(client):
    convo = ASK + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]
    r = chat(client, messages=convo, tools=TOOLS, max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop") and r.usage.completion_tokens >= 1


# ---------------------------------------------------------------- the real model: no calls, and what is asked
def test_auto_without_a_call_returns_the_text_as_content(client):
    auto = chat(client, tools=TOOLS, max_tokens=12, temperature=0, seed=3)
    none = chat(client, tools=TOOLS, tool_choice="none", max_tokens=12, temperature=0, seed=3)  # same prompt
    assert "<tool_call>" not in none.choices[0].message.content                 # the seed's text holds no call
    assert auto.choices[0].message.content == none.choices[0].message.content
    assert auto.choices[0].message.tool_calls is None
    assert auto.choices[0].finish_reason == none.choices[0].finish_reason != "tool_calls"


def test_auto_and_none_ask_no_output_shape(server, client, monkeypatch):
    seen = recording(monkeypatch, server)
    chat(client, tools=TOOLS, max_tokens=1)
    chat(client, tools=TOOLS, tool_choice="none", max_tokens=1)
    assert [p.structured_outputs for p in seen] == [None, None]


def test_required_asks_the_sampler_for_an_array_of_calls(server, client, monkeypatch):
    seen = recording(monkeypatch, server)
    chat(client, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=1)
    schema = seen[0].structured_outputs.json
    assert schema["type"] == "array" and schema["minItems"] == 1 and schema["maxItems"] == 1
    assert [i["properties"]["name"]["enum"][0] for i in schema["items"]["anyOf"]] == ["get_weather", "get_time"]
    assert schema["items"]["anyOf"][0]["properties"]["parameters"] == WEATHER["function"]["parameters"]
    assert seen[0].structured_outputs.disable_any_whitespace is True       # the server's setting


def test_required_returns_the_calls_the_sampler_held_to_the_schema(client):
    r = chat(client, tools=[STRICT_TIME, UNIT], tool_choice="required", parallel_tool_calls=False,
             max_tokens=100, temperature=0)
    call, = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and r.choices[0].message.content is None
    args = json.loads(call.function.arguments)
    assert (call.function.name, args) in (("get_time", {}), ("set_unit", {"unit": "c"}), ("set_unit", {"unit": "f"}))
    assert call.id.startswith("call_") and call.type == "function"


def test_required_streams_its_calls_when_the_array_is_complete(client):
    calls, finish = [], None
    for chunk in chat(client, tools=[STRICT_TIME, UNIT], tool_choice="required", parallel_tool_calls=False,
                      max_tokens=100, temperature=0, stream=True):
        if chunk.choices:
            assert not chunk.choices[0].delta.content                 # the JSON array is never content
            calls += chunk.choices[0].delta.tool_calls or []
            finish = chunk.choices[0].finish_reason or finish
    whole = chat(client, tools=[STRICT_TIME, UNIT], tool_choice="required", parallel_tool_calls=False,
                 max_tokens=100, temperature=0).choices[0].message.tool_calls
    assert finish == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        (c.function.name, c.function.arguments) for c in whole]


def test_required_cut_short_is_content_with_the_engines_finish(client):
    r = chat(client, tools=TOOLS, tool_choice="required", max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason == "length" and r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content.startswith("[")                # the array the sampler began


def test_a_named_function_asks_for_its_parameters_and_returns_that_call(server, client, monkeypatch):
    seen = recording(monkeypatch, server)
    r = chat(client, tools=[WEATHER, UNIT], tool_choice={"type": "function", "function": {"name": "set_unit"}},
             max_tokens=100, temperature=0)
    assert seen[0].structured_outputs.json == UNIT["function"]["parameters"]
    call, = r.choices[0].message.tool_calls                   # the whole output is that call's arguments
    assert call.function.name == "set_unit" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) in ({"unit": "c"}, {"unit": "f"})
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content is None   # OpenAI and vLLM


def test_a_tool_schema_that_does_not_compile_is_a_400_naming_tools(server):
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "string", "pattern": "(unclosed"}}}}}
    r = post(server, "/v1/chat/completions", {"model": "rnd", "messages": ASK, "tools": [bad], "max_tokens": 2,
                                              "tool_choice": "required"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools", r.text


# ---------------------------------------------------------------- scripted model text through the server
def test_auto_returns_parsed_tool_calls(server, client, monkeypatch):
    script(monkeypatch, server, pieces(CALLS))
    r = chat(client, tools=TOOLS, max_tokens=50)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert m.content == "I will look."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert all(c.type == "function" and c.id.startswith("call_") for c in m.tool_calls)


def test_parallel_tool_calls_false_returns_one_call(server, client, monkeypatch):
    script(monkeypatch, server, pieces(CALLS))
    r = chat(client, tools=TOOLS, parallel_tool_calls=False, max_tokens=50)
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["get_weather"]


def test_streamed_tool_calls_in_openai_chunk_shape(server, client, monkeypatch):
    script(monkeypatch, server, pieces(CALLS))
    content, calls, finish = "", {}, None
    for chunk in chat(client, tools=TOOLS, max_tokens=50, stream=True):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        content += ch.delta.content or ""
        for d in ch.delta.tool_calls or ():
            c = calls.setdefault(d.index, {"id": d.id, "name": d.function.name, "arguments": ""})
            c["arguments"] += d.function.arguments or ""
        finish = ch.finish_reason or finish
        assert "<tool_call" not in (ch.delta.content or "")          # a marker is never streamed as content
    assert content == "I will look." and finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert all(c["id"].startswith("call_") for c in calls.values())


def test_required_with_a_valid_array_returns_tool_calls(server, client, monkeypatch):
    text = json.dumps([{"name": "get_time", "parameters": {}}])
    script(monkeypatch, server, pieces(text))
    r = chat(client, tools=TOOLS, tool_choice="required", max_tokens=50)
    assert r.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls] == [("get_time", "{}")]


def test_streamed_named_function_sends_its_arguments_in_fragments(server, client, monkeypatch):
    script(monkeypatch, server, pieces('{"city": "Oslo"}', 4))
    frags, first = [], None
    for chunk in chat(client, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                      max_tokens=50, stream=True):
        for d in (chunk.choices[0].delta.tool_calls or ()) if chunk.choices else ():
            first = first or d
            frags.append(d.function.arguments)
    assert first.function.name == "get_weather" and first.id.startswith("call_") and first.type == "function"
    assert "".join(frags) == '{"city": "Oslo"}' and len(frags) > 1
