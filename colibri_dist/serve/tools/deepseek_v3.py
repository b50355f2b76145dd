"""The `deepseek_v3` tool-call format (DeepSeek-V3's template, vLLM's deepseekv3_tool_parser):
`<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```
<｜tool▁call▁end｜>`, then `<｜tool▁calls▁end｜>`.

Role in the data flow: a row of tools.PARSERS; the region from START to END holds every call of the turn.
The arguments are passed on as the model wrote them (vLLM does the same).
"""
import re

START, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL = re.compile(r"<｜tool▁call▁begin｜>(?P<type>.*?)<｜tool▁sep｜>(?P<name>.*?)\n```json\n(?P<args>.*?)\n```"
                  r"<｜tool▁call▁end｜>", re.DOTALL)


def parse(region, tools):
    """-> [(name, arguments JSON text)] of the region's calls, or None when it holds none."""
    calls = [(m["name"].strip(), m["args"].strip()) for m in CALL.finditer(region)]
    return calls if calls and all(name for name, _ in calls) else None
