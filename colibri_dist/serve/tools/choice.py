"""tool_choice "required" and a named function: what they ask of the sampler (a JSON schema for
structured outputs, as vLLM builds it) and how that output is read back as tool calls.

Role in the data flow: params.parse_chat puts `schema(tool_request)` into the request's
sampling["structured_outputs"]; chat_output.py reads the output with `required_calls` (a JSON array of
{"name", "parameters"}) or takes the whole output as the named function's arguments.
"""
import json

from ...errors import InvalidArgument
from ...generate.structured_params import StructuredOutputsParams
from ..errors import bad_param

EMPTY = {"type": "object", "properties": {}}


def schema(treq):
    """The JSON schema the output must follow, or None (auto / none: free text); one structured outputs
    refuses (e.g. longer than its bound) is a 400 naming tools, the field the client wrote it in."""
    if treq.choice == "named":
        spec = next(_parameters(t) for t in treq.tools if t["function"]["name"] == treq.name)
    elif treq.choice == "required":
        spec = required_schema(treq.tools, treq.parallel)
    else:
        return None
    try:
        StructuredOutputsParams(json=spec)
    except InvalidArgument as exc:
        raise bad_param("tools", f"the schema tool_choice {treq.choice!r} asks for is refused ({exc})") from None
    return spec


def required_schema(tools, parallel=True):
    """vLLM's: an array (at least one item; at most one without parallel calls) of objects, each
    {"name": one tool's name, "parameters": that tool's parameters}; the tools' $defs lifted to the top.
    One difference: no other keys in an item (vLLM allows them and drops them when reading; allowed, a
    weak model keeps writing keys and never closes the object)."""
    defs, items = {}, []
    for t in tools:
        params = dict(_parameters(t))
        defs.update(params.pop("$defs", None) or {})
        items.append({"properties": {"name": {"type": "string", "enum": [t["function"]["name"]]},
                                     "parameters": params},
                      "required": ["name", "parameters"], "additionalProperties": False})
    out = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": items}}
    if not parallel:
        out["maxItems"] = 1
    if defs:
        out["$defs"] = defs
    return out


def required_calls(text, tools):
    """The output of a "required" request -> [(name, arguments JSON text)], or None when it is not such
    an array (the sampler did not constrain it: then it stays content)."""
    try:
        got = json.loads(text)
    except (ValueError, RecursionError):
        return None
    names = {t["function"]["name"] for t in tools}
    if not isinstance(got, list) or not got or not all(
            isinstance(c, dict) and c.get("name") in names and isinstance(c.get("parameters"), dict) for c in got):
        return None
    return [(c["name"], json.dumps(c["parameters"], ensure_ascii=False)) for c in got]


def _parameters(tool):
    return tool["function"].get("parameters") or EMPTY
