"""Tool-call parsers, the call stream, reasoning split and choice shaping on fixed texts (no server).

Every scripted text is also fed in pieces (one character at a time, and at every split point) through the
same objects the server uses: the streamed result must equal the whole-text result.
"""
import json

import pytest

from colibri_dist.serve import chat_output, reasoning
from colibri_dist.serve.errors import APIError
from colibri_dist.serve.tools import PARSERS, choice, parser_for
from colibri_dist.serve.tools import request as tool_request
from colibri_dist.serve.tools.stream import CallStream

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]

HERMES = ('Let me check.\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n'
          '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
DEEPSEEK = ('Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
            '{"city": "Paris", "days": 2}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>'
            'get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
GLM = ('Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>2024</arg_value>\n'
       '<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>\n<tool_call>get_time\n</tool_call>')


def whole(parser, text, tools=TOOLS, parallel=True):
    s = CallStream(parser, tools, parallel)
    c1, k1 = s.feed(text)
    c2, k2 = s.finish()
    return c1 + c2, k1 + k2


def pieces(parser, text, cuts, tools=TOOLS):
    s = CallStream(parser, tools)
    content, calls, at = "", [], 0
    for cut in list(cuts) + [len(text)]:
        c, k = s.feed(text[at:cut])
        content, calls, at = content + c, calls + k, cut
    c, k = s.finish()
    return content + c, calls + k


def named(calls):
    return [(c["index"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("name,text,content,want", [
    ("hermes", HERMES, "Let me check.", [(0, "get_weather", {"city": "Paris", "days": 2}), (1, "get_time", {})]),
    ("deepseek_v3", DEEPSEEK, "Sure.", [(0, "get_weather", {"city": "Paris", "days": 2}), (1, "get_time", {})]),
    ("glm45", GLM, "Sure.", [(0, "get_weather", {"city": "2024", "days": 2}), (1, "get_time", {})]),
])
def test_parsers_find_calls_and_content(name, text, content, want):
    got_content, calls = whole(PARSERS[name], text)
    assert got_content == content
    assert named(calls) == want
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
    assert len({c["id"] for c in calls}) == len(calls)


@pytest.mark.parametrize("name,text", [("hermes", HERMES), ("deepseek_v3", DEEPSEEK), ("glm45", GLM)])
def test_streamed_pieces_say_what_the_whole_text_says(name, text):
    content, calls = whole(PARSERS[name], text)
    by_char = pieces(PARSERS[name], text, range(1, len(text)))
    assert by_char[0] == content and named(by_char[1]) == named(calls)
    for cut in range(1, len(text)):
        two = pieces(PARSERS[name], text, [cut])
        assert two[0] == content and named(two[1]) == named(calls), cut


def test_a_call_is_emitted_when_its_end_arrives_not_before():
    s = CallStream(PARSERS["hermes"], TOOLS)
    assert s.feed("Hi <tool") == ("Hi", [])                   # "<tool" may begin a call: held back
    assert s.feed('_call>{"name": "get_time", "arguments": {}}') == ("", [])
    content, calls = s.feed("</tool_call> done")
    assert content == "done" and named(calls) == [(0, "get_time", {})]


def test_text_that_only_looks_like_a_call_stays_content():
    text = "a <tool_call>not json</tool_call> b <tool_cal"
    assert whole(PARSERS["hermes"], text) == (text, [])
    assert whole(PARSERS["hermes"], "no calls here \n") == ("no calls here \n", [])


def test_an_unclosed_call_at_the_end_is_parsed_as_it_is():
    content, calls = whole(PARSERS["hermes"], '<tool_call>{"name": "get_time", "arguments": {"a": 1}}')
    assert content == "" and named(calls) == [(0, "get_time", {"a": 1})]


def test_parallel_tool_calls_false_keeps_the_first_call():
    content, calls = whole(PARSERS["hermes"], HERMES, parallel=False)
    assert named(calls) == [(0, "get_weather", {"city": "Paris", "days": 2})]


def test_glm45_reads_non_string_values_and_keeps_string_ones():
    _, calls = whole(PARSERS["glm45"], "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>[1]</arg_value>"
                                       "<arg_key>days</arg_key><arg_value>[1, 2]</arg_value></tool_call>")
    assert named(calls) == [(0, "get_weather", {"city": "[1]", "days": [1, 2]})]


def test_family_picks_the_parser_and_the_flag_wins():
    assert parser_for(None, "qwen3_moe").name == "hermes"
    assert parser_for(None, "qwen2_moe").name == "hermes"
    assert parser_for(None, "deepseek_v3").name == "deepseek_v3"
    assert parser_for(None, "glm4_moe").name == "glm45"
    assert parser_for(None, "mixtral") is None
    assert parser_for("glm45", "qwen3_moe").name == "glm45"


# ---------------------------------------------------------------- reasoning
def think(text, cuts=()):
    s = reasoning.ThinkStream(reasoning.PARSERS["qwen3"])
    r, c, at = "", "", 0
    for cut in list(cuts) + [len(text)]:
        a, b = s.feed(text[at:cut])
        r, c, at = r + a, c + b, cut
    a, b = s.finish()
    return r + a, c + b


@pytest.mark.parametrize("text,want", [
    ("<think>\nplan\n</think>\n\nanswer", ("\nplan\n", "\n\nanswer")),       # the model writes <think>
    ("plan</think>answer", ("plan", "answer")),                               # the template wrote it
    ("still thinking", ("still thinking", "")),                               # cut: all reasoning (vLLM)
    ("<think>a</think>", ("a", "")),
])
def test_reasoning_split_whole_and_streamed(text, want):
    assert think(text) == want
    assert think(text, range(1, len(text))) == want
    for cut in range(1, len(text)):
        assert think(text, [cut]) == want, cut


def test_both_reasoning_rows_use_think_tags():
    assert reasoning.PARSERS["deepseek_r1"] == reasoning.PARSERS["qwen3"] == ("<think>", "</think>")


# ---------------------------------------------------------------- choice shaping (what the server sends)
class State:
    def __init__(self, parser="hermes", think=None):
        self.tool_parser = PARSERS[parser] if parser else None
        self.reasoning = reasoning.PARSERS[think] if think else None


class Req:
    def __init__(self, body):
        self.tools = tool_request.of_body(body)
        spec = choice.schema(self.tools) if self.tools is not None else None
        self.sampling = {"structured_outputs": {"json": spec}} if spec is not None else {}


def shaped(state, body, text, cuts, reason="stop"):
    """-> (whole message fields, finish) and the stream's deltas joined as a message would be."""
    req = Req(body)
    message = chat_output.shaper_for(state, req).message(text, reason)
    sh, deltas, at = chat_output.shaper_for(state, req), {}, 0
    for cut in list(cuts) + [len(text)]:
        deltas = chat_output.join(deltas, sh.feed(text[at:cut]))
        at = cut
    rest, streamed_reason = sh.finish(reason)
    return message, chat_output.join(deltas, rest), streamed_reason


def test_auto_with_reasoning_parses_calls_after_the_thinking_only():
    text = '<think>maybe <tool_call>{"name": "get_time", "arguments": {}}</tool_call>?</think>\n' + HERMES
    (msg, reason), deltas, sreason = shaped(State(think="qwen3"), {"tools": TOOLS}, text, range(1, len(text)))
    assert msg["reasoning_content"].startswith("maybe <tool_call>")
    assert msg["content"] == "\nLet me check."
    assert named([dict(c, index=i) for i, c in enumerate(msg["tool_calls"])]) == [
        (0, "get_weather", {"city": "Paris", "days": 2}), (1, "get_time", {})]
    assert reason == sreason == "tool_calls"
    assert deltas["reasoning_content"] == msg["reasoning_content"] and deltas["content"] == msg["content"]
    assert named(deltas["tool_calls"]) == named([dict(c, index=i) for i, c in enumerate(msg["tool_calls"])])


def test_auto_without_calls_is_content_and_stop():
    (msg, reason), deltas, _ = shaped(State(), {"tools": TOOLS}, "just words", [3])
    assert msg == {"content": "just words"} and reason == "stop" and deltas == {"content": "just words"}


def test_named_choice_streams_the_arguments_of_that_function():
    body = {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    text = '{"city": "Oslo"}'
    (msg, reason), deltas, _ = shaped(State(parser=None), body, text, [4, 9])
    assert msg["content"] is None and reason == "stop"                    # OpenAI and vLLM: stop
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]] == [("get_weather", text)]
    first, *rest = deltas["tool_calls"]
    assert first["function"]["name"] == "get_weather" and first["id"].startswith("call_")
    assert all("name" not in d["function"] and d["index"] == 0 for d in rest)
    assert first["function"]["arguments"] + "".join(d["function"]["arguments"] for d in rest) == text


def test_required_reads_an_array_of_calls_and_says_tool_calls():
    body = {"tools": TOOLS, "tool_choice": "required"}
    text = json.dumps([{"name": "get_weather", "parameters": {"city": "Rome"}}, {"name": "get_time", "parameters": {}}])
    (msg, reason), deltas, sreason = shaped(State(parser=None), body, text, [5])
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]] == [
        ("get_weather", {"city": "Rome"}), ("get_time", {})]
    assert msg["content"] is None and reason == sreason == "tool_calls"
    (msg, reason), _, _ = shaped(State(parser=None), body, "not json", [], reason="length")
    assert msg == {"content": "not json"} and reason == "length"         # unconstrained output stays content


def test_none_with_no_reasoning_parser_leaves_the_text_alone():
    assert chat_output.shaper_for(State(), Req({"tools": TOOLS, "tool_choice": "none"})) is None
    assert chat_output.shaper_for(State(), Req({})) is None


# ---------------------------------------------------------------- request checks and schemas
@pytest.mark.parametrize("body,param", [
    ({"tools": "x"}, "tools"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]}, "tools"),
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {}}}, "tool_choice"),
])
def test_bad_tool_fields_name_the_field(body, param):
    with pytest.raises(APIError) as e:
        tool_request.of_body(body)
    assert e.value.status == 400 and e.value.param == param


def test_defaults_follow_vllm():
    assert tool_request.of_body({"tools": TOOLS}).choice == "auto"
    assert tool_request.of_body({"tool_choice": "none"}) is None
    assert tool_request.of_body({"tools": [], "tool_choice": "required"}) is None      # required + [] = none
    assert tool_request.of_body({"tools": TOOLS, "tool_choice": "none"}).tools == TOOLS   # still rendered


def test_schemas_of_required_and_named():
    named_req = tool_request.of_body({"tools": TOOLS, "tool_choice": {"type": "function",
                                                                      "function": {"name": "get_weather"}}})
    assert choice.schema(named_req) == WEATHER["function"]["parameters"]
    s = choice.schema(tool_request.of_body({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}))
    assert s["type"] == "array" and s["minItems"] == 1 and s["maxItems"] == 1
    assert [i["properties"]["name"]["enum"] for i in s["items"]["anyOf"]] == [["get_weather"], ["get_time"]]
    assert s["items"]["anyOf"][0]["properties"]["parameters"] == WEATHER["function"]["parameters"]
    assert "maxItems" not in choice.required_schema(TOOLS, parallel=True)


def test_assistant_tool_call_arguments_become_objects_for_the_template():
    calls = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]
    assert tool_request.message_tool_calls(0, calls)[0]["function"]["arguments"] == {"a": 1}
    with pytest.raises(APIError) as e:
        tool_request.message_tool_calls(2, [{"function": {"name": "f", "arguments": "{bad"}}])
    assert e.value.param == "messages" and "entry 2" in e.value.message


def test_json_nested_deeper_than_python_parses_stays_content():
    deep = "[" * 5000 + "]" * 5000
    text = "<tool_call>" + deep + "</tool_call>"
    assert whole(PARSERS["hermes"], text) == (text, [])
    assert choice.required_calls(deep, TOOLS) is None


def test_a_schema_structured_outputs_refuses_is_a_400_naming_tools():
    huge = {"type": "function", "function": {"name": "big", "parameters": {
        "type": "object", "description": "x" * (1 << 20)}}}
    with pytest.raises(APIError) as e:
        choice.schema(tool_request.of_body({"tools": [huge], "tool_choice": "required"}))
    assert e.value.status == 400 and e.value.param == "tools"


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_any_split_of_marker_rich_text_says_what_the_whole_says(name):
    import random
    rng = random.Random(7)
    p = PARSERS[name]
    bits = [p.start, p.end, " ", "\n", "x", "<", "</", '{"name": "get_time", "arguments": {}}', "get_time\n",
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>"]
    for _ in range(200):
        text = "".join(rng.choice(bits) for _ in range(rng.randint(1, 12)))
        want_content, want_calls = whole(p, text)
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 6)))) if len(text) > 1 else []
        content, calls = pieces(p, text, cuts)
        assert (content, named(calls)) == (want_content, named(want_calls)), (text, cuts)


def test_required_and_named_output_after_the_thinking():
    """The schema holds the content after </think> (start_after): the thinking is split off first."""
    text = "<think>hmm</think>" + json.dumps([{"name": "get_time", "parameters": {}}])
    (msg, reason), _, _ = shaped(State(think="qwen3"), {"tools": TOOLS, "tool_choice": "required"}, text, [3])
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_time"] and msg["reasoning_content"] == "hmm"
    body = {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    (msg, _), _, _ = shaped(State(think="qwen3"), body, "<think>x</think>{}", [])
    assert msg["tool_calls"][0]["function"]["arguments"] == "{}" and msg["reasoning_content"] == "x"


def test_hermes_parses_back_what_the_template_renders():
    """Round trip: assistant tool_calls rendered by a Qwen3-style (Hermes) template, parsed back by the hermes
    parser, are the same calls. (The families' own templates are not in this tree; the random test model's
    template writes Qwen3's format.)"""
    from colibri_dist.generate.chat import ChatTemplate
    from colibri_dist.testing.random_llm import CHAT_TEMPLATE
    calls = [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                "arguments": {"city": "Paris", "days": 2}}},
             {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": {}}}]
    text = ChatTemplate.from_config({"chat_template": CHAT_TEMPLATE}).render(
        [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": "Let me check.", "tool_calls": calls}],
        add_generation_prompt=False, tools=TOOLS)
    said = text.split("<|im_start|>assistant\n", 1)[1].split("<|im_end|>", 1)[0]
    content, got = whole(PARSERS["hermes"], said)
    assert content == "Let me check."
    assert named(got) == [(i, c["function"]["name"], c["function"]["arguments"]) for i, c in enumerate(calls)]
    for cut in range(0, len(said), 7):                  # and streamed in pieces
        assert named(pieces(PARSERS["hermes"], said, [cut])[1]) == named(got)
