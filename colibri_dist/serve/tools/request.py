"""The tool fields of a /v1/chat/completions body, checked as vLLM's ChatCompletionRequest checks them:
`tools`, `tool_choice`, `parallel_tool_calls`, and the `tool_calls` of assistant messages.

Role in the data flow: params.parse_chat calls `of_body` (one ToolRequest, or None without tools);
params._messages calls `message_tool_calls`. Whatever is wrong is a 400 naming the field.
"""
import json
from dataclasses import dataclass

from ..errors import bad_param

MAX_TOOLS = 128                              # OpenAI's bound on `tools`
CHOICES = ("none", "auto", "required")
NAMED = "{\"type\": \"function\", \"function\": {\"name\": ...}}"


@dataclass
class ToolRequest:
    tools: list                  # the function tools as sent (the chat template receives them)
    choice: str                  # "none", "auto", "required" or "named"
    name: str | None = None      # the function of a named choice
    parallel: bool = True


def of_body(body):
    """-> ToolRequest, or None when the request has no tools (and a tool_choice of none, or none at all)."""
    tools = check_tools(body.get("tools"))
    parallel = body.get("parallel_tool_calls")
    parallel = True if parallel is None else parallel        # its type was checked by the field table
    choice, name = check_choice(body.get("tool_choice"), tools)
    if choice == "required" and tools == []:                 # vLLM (and OpenAI): behaves as "none"
        choice, tools = "none", None
    if not tools:
        return None
    return ToolRequest(tools, choice, name, parallel)


def check_tools(v):
    if v is None:
        return None
    if not isinstance(v, list) or len(v) > MAX_TOOLS:
        raise bad_param("tools", f"expected a list of at most {MAX_TOOLS} function tools")
    for i, t in enumerate(v):
        _check_tool(i, t)
    return v


def _check_tool(i, t):
    if not isinstance(t, dict) or t.get("type") != "function":
        raise bad_param("tools", f"entry {i} must be {{\"type\": \"function\", \"function\": {{...}}}}")
    f = t.get("function")
    if not isinstance(f, dict):
        raise bad_param("tools", f"entry {i}: function must be an object with a name")
    if not isinstance(f.get("name"), str) or not f["name"]:
        raise bad_param("tools", f"entry {i}: function.name must be a non-empty string")
    if f.get("parameters") is not None and not isinstance(f["parameters"], dict):
        raise bad_param("tools", f"entry {i}: function.parameters must be a JSON schema object")
    if f.get("description") is not None and not isinstance(f["description"], str):
        raise bad_param("tools", f"entry {i}: function.description must be a string")


def check_choice(v, tools):
    """-> (choice, name); vLLM's defaults: "auto" with tools, "none" without."""
    if v is None:
        return ("auto" if tools else "none"), None
    if v == "none":
        return "none", None
    if tools is None:
        raise bad_param("tool_choice", "needs tools: when using tool_choice, tools must be set")
    if v in CHOICES:
        return v, None
    if not isinstance(v, dict) or v.get("type") != "function" or not isinstance(v.get("function"), dict):
        raise bad_param("tool_choice", f"expected \"none\", \"auto\", \"required\" or {NAMED}")
    name = v["function"].get("name")
    if not isinstance(name, str) or not name:
        raise bad_param("tool_choice", f"function.name must be a non-empty string: {NAMED}")
    if name not in {t["function"]["name"] for t in tools}:
        raise bad_param("tool_choice", f"the function {name!r} is not one of the tools")
    return "named", name


def message_tool_calls(i, calls):
    """An assistant message's tool_calls -> the template's: arguments given as JSON text are read into an
    object (vLLM does this before rendering; HF templates accept either)."""
    if not isinstance(calls, list):
        raise bad_param("messages", f"entry {i}: tool_calls must be a list")
    out = []
    for c in calls:
        f = c.get("function") if isinstance(c, dict) else None
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise bad_param("messages", f"entry {i}: each tool call must be {{\"type\": \"function\", "
                                        f"\"function\": {{\"name\", \"arguments\"}}}}")
        out.append({**c, "function": {**f, "arguments": _arguments(i, f.get("arguments"))}})
    return out


def _arguments(i, args):
    if not isinstance(args, str):
        return args if args is not None else {}
    try:
        return json.loads(args)
    except ValueError:
        raise bad_param("messages", f"entry {i}: tool call arguments are not valid JSON") from None
