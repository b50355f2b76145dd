"""The `deepseek_v3` tool-call format (DeepSeek-V3's template, vLLM's deepseekv3_tool_parser):
`<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```
<｜tool▁call▁end｜>`, then `<｜tool▁calls▁end｜>`.

Role in the data flow: a row of tools.PARSERS; the region from START to END holds every call of the turn.
The arguments are passed on as the model wrote them (vLLM does the same).
"""
import re

START, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
BEGIN, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
CALL = re.compile(r"(?P<type>[^\n]*?)<｜tool▁sep｜>(?P<name>[^\n]*)\n```json\n(?P<args>.*)\n```\s*", re.DOTALL)


def parse(region, tools):
    """-> [(name, arguments JSON text)] of the region's calls, or None when it holds none. Each call is
    the text between a call's begin and end markers (one pass over the region, whatever it holds)."""
    calls = []
    for piece in region.split(BEGIN)[1:]:
        body, found, _ = piece.partition(CALL_END)
        m = CALL.fullmatch(body) if found else None
        if m and m["name"].strip():
            calls.append((m["name"].strip(), m["args"].strip()))
    return calls or None
