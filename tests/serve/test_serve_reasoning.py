"""--reasoning-parser qwen3 through the real `openai` client and a live server over the random-weight model:
`reasoning_content` beside `content` in messages and stream deltas, and tool calls parsed only after the
thinking. Scripted text (scripted.py) stands in for the model's words where a fixed text is needed."""
import json

import pytest

from colibri_dist.testing import random_llm

from scripted import recording, script
from serve_helpers import start_server

openai = pytest.importorskip("openai")

ASK = [{"role": "user", "content": "why?"}]
TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
CALL = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = random_llm.build(tmp_path_factory.mktemp("reasoning") / "m.colibri")
    s = start_server(path, served_model_name=("rnd",), reasoning_parser="qwen3", tool_call_parser="hermes",
                     disable_any_whitespace=True)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def chat(client, **kw):
    return client.chat.completions.create(model="rnd", messages=ASK, **{"max_tokens": 40, **kw})


def streamed(client, **kw):
    reasoning, content, calls, finish = "", "", [], None
    for chunk in chat(client, stream=True, **kw):
        if chunk.choices:
            d = chunk.choices[0].delta
            reasoning += getattr(d, "reasoning_content", None) or ""
            content += d.content or ""
            calls += d.tool_calls or []
            finish = chunk.choices[0].finish_reason or finish
    return reasoning, content, calls, finish


def pieces(text, size=2):
    return [text[i:i + size] for i in range(0, len(text), size)]


def test_thinking_is_reasoning_content_the_rest_content(server, client, monkeypatch):
    script(monkeypatch, server, pieces("<think>\nfirst this\n</think>\n\nthe answer"))
    m = chat(client).choices[0].message
    assert m.reasoning_content == "\nfirst this\n" and m.content == "\n\nthe answer"


def test_streamed_deltas_carry_reasoning_content_then_content(server, client, monkeypatch):
    script(monkeypatch, server, pieces("first this</think>the answer"))      # <think> was in the prompt
    reasoning, content, calls, finish = streamed(client)
    assert (reasoning, content, calls, finish) == ("first this", "the answer", [], "stop")


def test_tool_calls_are_parsed_after_the_thinking_only(server, client, monkeypatch):
    text = "<think>should I " + CALL + "?</think>\n" + CALL
    script(monkeypatch, server, pieces(text))
    r = chat(client, tools=TOOLS)
    m = r.choices[0].message
    assert m.reasoning_content == "should I " + CALL + "?"
    assert [c.function.name for c in m.tool_calls] == ["get_time"] and m.content is None
    assert r.choices[0].finish_reason == "tool_calls"
    script(monkeypatch, server, pieces(text))
    reasoning, content, calls, finish = streamed(client, tools=TOOLS)
    assert reasoning == m.reasoning_content and content == "" and finish == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("get_time", {})]


def test_the_model_without_an_end_of_thinking_is_all_reasoning(client):
    whole = chat(client, temperature=0, seed=5, max_tokens=16)
    m = whole.choices[0].message
    assert "</think>" not in m.reasoning_content and whole.usage.completion_tokens == 16
    assert m.content is None                                        # vLLM: the answer was cut
    reasoning, content, _, finish = streamed(client, temperature=0, seed=5, max_tokens=16)
    assert (reasoning, content, finish) == (m.reasoning_content, "", whole.choices[0].finish_reason)


def test_a_named_function_starts_after_the_thinking(server, client, monkeypatch):
    """vLLM's rule: with a reasoning parser the schema holds the content after </think> (start_after); the
    thinking before it is free. The random model never ends its thinking, so its output stays reasoning."""
    unit = {"type": "function", "function": {"name": "set_unit", "parameters": {
        "type": "object", "properties": {"unit": {"enum": ["c", "f"]}}, "required": ["unit"],
        "additionalProperties": False}}}
    seen = recording(monkeypatch, server)
    r = chat(client, tools=[unit], tool_choice={"type": "function", "function": {"name": "set_unit"}},
             temperature=0, max_tokens=16)
    assert seen[0].structured_outputs.start_after == "</think>" and seen[0].structured_outputs.json is not None
    m = r.choices[0].message                  # vLLM's shape: the named call is there, its arguments empty
    assert m.reasoning_content and [c.function.arguments for c in m.tool_calls] == [""]
    assert r.usage.completion_tokens == 16


def test_a_response_format_holds_the_content_after_the_thinking(server, client, monkeypatch):
    fmt = {"type": "json_schema", "json_schema": {"name": "u", "schema": {
        "type": "object", "properties": {"u": {"enum": ["c", "f"]}}, "required": ["u"], "additionalProperties": False}}}
    script(monkeypatch, server, pieces('<think>let me see</think>{"u": "f"}'))
    m = chat(client, response_format=fmt, temperature=0).choices[0].message
    assert m.reasoning_content == "let me see" and json.loads(m.content) == {"u": "f"}
    seen = recording(monkeypatch, server)
    chat(client, response_format=fmt, temperature=0, max_tokens=8)
    assert seen[0].structured_outputs.start_after == "</think>"
