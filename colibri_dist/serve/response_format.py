"""OpenAI's `response_format` and vLLM's `structured_outputs` body field -> SamplingParams.structured_outputs.

Role in the data flow: parse_chat / parse_completion (params.py) call `structured_outputs_of(body)`; the
dict it returns goes into the request's sampling fields, and generation.py compiles it off the event loop
before anything is submitted (`check_compiles`), so a schema that does not compile is a 400 naming the
field, never an error after the response started. Mapping (OpenAI -> vLLM):
    {"type": "text"}                                          -> none
    {"type": "json_object"}                                   -> {"json_object": true}
    {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} -> {"json": schema}
`strict` is accepted either way: the output is always held to the schema token by token.
"""
import re

from ..errors import InvalidArgument
from ..generate.structured_params import StructuredOutputsParams
from .errors import APIError, bad_param

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_JSON_KINDS = ("json", "json_object")


def structured_outputs_of(body, disable_any_whitespace=False):
    """The structured_outputs dict a request asks for (None = unconstrained); 400 naming the field."""
    fmt, so = body.get("response_format"), body.get("structured_outputs")
    if fmt is not None and so is not None:
        raise bad_param("response_format", "send either response_format or structured_outputs, not both")
    out = _of_response_format(fmt) if fmt is not None else _of_structured_outputs(so) if so is not None else None
    if out is not None and disable_any_whitespace and any(k in out for k in _JSON_KINDS):
        out.setdefault("disable_any_whitespace", True)
    if out is not None:
        _checked(out)
    return out


def _of_response_format(fmt):
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise bad_param("response_format", "must be an object with a type (text, json_object or json_schema)")
    kind = fmt["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json_object": True}
    if kind != "json_schema":
        raise bad_param("response_format.type", f"must be text, json_object or json_schema, got {kind!r}")
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        raise bad_param("response_format.json_schema", "must be an object with name and schema")
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise bad_param("response_format.json_schema.name", "must be 1-64 letters, digits, '_' or '-'")
    if "strict" in spec and spec["strict"] is not None and not isinstance(spec["strict"], bool):
        raise bad_param("response_format.json_schema.strict", "must be a boolean")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise bad_param("response_format.json_schema.schema", "must be a JSON schema object")
    return {"json": schema}


def _of_structured_outputs(so):
    if not isinstance(so, dict):
        raise bad_param("structured_outputs", "must be an object (json, regex, choice, grammar or json_object)")
    return dict(so)


def _checked(so):
    try:
        StructuredOutputsParams.of(so)
    except InvalidArgument as exc:
        raise bad_param(exc.parameter or "structured_outputs", str(exc)) from None


def check_compiles(info, so):
    """Compile the constraint against the served model's tokenizer (cached); 400 naming the field. Runs on a
    worker thread (generation.py): llguidance's own fuel and size limits bound it."""
    if so is None:
        return
    try:
        info.grammars().compile(StructuredOutputsParams.of(so))
    except InvalidArgument as exc:
        raise APIError(400, str(exc), param=exc.parameter or "structured_outputs", code="invalid_value") from None
