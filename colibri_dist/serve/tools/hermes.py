"""The `hermes` tool-call format (Qwen3, Qwen2.5, Hermes 2 Pro): each call is
`<tool_call>{"name": NAME, "arguments": {...}}</tool_call>` (vLLM's hermes_tool_parser).

Role in the data flow: a row of tools.PARSERS; tools/stream.py cuts the generated text into the regions
between START and END and hands each region here.
"""
import json

START, END = "<tool_call>", "</tool_call>"


def parse(region, tools):
    """One `<tool_call>...</tool_call>` region (END may be missing when the output was cut) -> [(name,
    arguments JSON text)], or None when it is not a call (then the text stays content, as in vLLM)."""
    body = region[len(START):]
    if body.endswith(END):
        body = body[:-len(END)]
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):    # RecursionError: JSON nested deeper than Python parses
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return [(obj["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))]
