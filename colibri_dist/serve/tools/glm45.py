"""The `glm45` tool-call format (GLM-4.5's template, vLLM's glm4_moe_tool_parser):
`<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>...</tool_call>`.

Role in the data flow: a row of tools.PARSERS. A value is kept as written when the tool's parameters
schema says that argument is a string; otherwise it is read as JSON (then as a Python literal), as vLLM does.
"""
import ast
import json

START, END = "<tool_call>", "</tool_call>"


def parse(region, tools):
    """One `<tool_call>...</tool_call>` region -> [(name, arguments JSON text)], or None."""
    body = region[len(START):]
    if body.endswith(END):
        body = body[:-len(END)]
    cut = min(i for i in (body.find("\n"), body.find("<arg_key>"), len(body)) if i >= 0)
    name = body[:cut].strip()
    if not name:
        return None
    strings = _string_args(tools, name)
    args = {k: v if k in strings else _value(v) for k, v in _pairs(body[cut:])}
    return [(name, json.dumps(args, ensure_ascii=False))]


def _pairs(text):
    """`<arg_key>K</arg_key> <arg_value>V</arg_value>` pairs, stripped (one pass: what vLLM's pattern
    `<arg_key>(.*?)</arg_key>\\s*<arg_value>(.*?)</arg_value>` finds, without its backtracking)."""
    for piece in text.split("<arg_key>")[1:]:
        key, found, rest = piece.partition("</arg_key>")
        rest = rest.lstrip()
        if found and rest.startswith("<arg_value>"):
            value, closed, _ = rest[len("<arg_value>"):].partition("</arg_value>")
            if closed:
                yield key.strip(), value.strip()


def _string_args(tools, name):
    for t in tools or ():
        if t["function"]["name"] == name:
            props = (t["function"].get("parameters") or {}).get("properties") or {}
            return {k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"}
    return set()


def _value(text):
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = ast.literal_eval(text)
        json.dumps(value)                 # a set, bytes, complex... is not an argument: keep the text
        return value
    except Exception:                     # noqa: BLE001 - whatever the model wrote stays text
        return text
