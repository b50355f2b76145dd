"""StructuredOutputsParams: what shape a request's output must have (vLLM's names and meanings).

Role in the data flow: a caller puts one in SamplingParams(structured_outputs=...) (or a dict with the
same keys: a job row, the server's `structured_outputs` body field, OpenAI's `response_format` mapped by
serve/params.py). Exactly one constraint is set: `json` (a JSON schema, dict or JSON text), `regex`,
`choice` (a list of strings), `grammar` (a Lark grammar, or GBNF as llama.cpp writes it), `json_object`
(any JSON object). The grammar room (generate/grammar.py) compiles it; the sampler masks every token the
constraint does not allow. Checked here: the shape of the fields, with the field named; whether the
schema / regex / grammar compiles is checked when the request is added (grammar.py), named the same way.
"""
import json
from dataclasses import dataclass

from ..errors import InvalidArgument

KINDS = ("json", "regex", "choice", "grammar", "json_object")
OPTIONS = ("disable_any_whitespace", "start_after")
MAX_SPEC_CHARS = 1 << 20          # a schema / regex / grammar longer than 1 MiB is refused before compiling


@dataclass(frozen=True)
class StructuredOutputsParams:
    """json: a JSON schema (dict, or its JSON text) the output must validate against; regex: a regular
    expression the whole output must match; choice: the output is one of these strings; grammar: a Lark
    (or GBNF) grammar; json_object: True = any JSON object. disable_any_whitespace: JSON without free
    whitespace between tokens (compact output). At most one of json/regex/choice/grammar/json_object.
    start_after (colibri's): the constraint holds from the token after this text is generated (e.g.
    "</think>": a reasoning model thinks freely first, as vLLM's reasoning parsers arrange); `colibri serve
    --reasoning-parser` sets it."""
    json: object = None
    regex: str | None = None
    choice: object = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    start_after: str | None = None

    def __post_init__(self):
        set_ = object.__setattr__
        given = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise _bad("structured_outputs", self, f"set exactly one of {', '.join(KINDS)} "
                                                   f"(got {', '.join(given) or 'none'})")
        if self.json is not None:
            set_(self, "json", _schema(self.json))
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value or len(value) > MAX_SPEC_CHARS):
                raise _bad(name, value, f"must be a non-empty string of at most {MAX_SPEC_CHARS} characters")
        if self.choice is not None:
            set_(self, "choice", _choice(self.choice))
        if self.json_object not in (None, True, False):
            raise _bad("json_object", self.json_object, "must be a bool")
        if not isinstance(self.disable_any_whitespace, bool):
            raise _bad("disable_any_whitespace", self.disable_any_whitespace, "must be a bool")
        if self.start_after is not None and (not isinstance(self.start_after, str) or not self.start_after):
            raise _bad("start_after", self.start_after, "must be a non-empty string")

    @property
    def kind(self):
        return next(k for k in KINDS if getattr(self, k) not in (None, False))

    def key(self):
        """A hashable, canonical name of the compiled constraint (the compile cache's key; start_after is
        not compiled)."""
        value = getattr(self, self.kind)
        text = json.dumps(value, sort_keys=True) if self.kind in ("json", "choice") else str(value)
        return self.kind, text, self.disable_any_whitespace

    def to_dict(self):
        return {k: getattr(self, k) for k in KINDS + OPTIONS if getattr(self, k) not in (None, False)}

    @classmethod
    def of(cls, value):
        """A StructuredOutputsParams from itself, a dict of its fields (unknown keys named), or None."""
        if value is None or isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise _bad("structured_outputs", value, "must be a mapping of json/regex/choice/grammar/json_object")
        known = KINDS + OPTIONS
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            raise _bad(unknown[0], value[unknown[0]], f"unknown structured_outputs field (known: {', '.join(known)})")
        return cls(**value)


def _schema(value):
    if isinstance(value, str):
        if len(value) > MAX_SPEC_CHARS:
            raise _bad("json", "...", f"the schema is longer than {MAX_SPEC_CHARS} characters")
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise _bad("json", value, f"is not valid JSON ({exc})") from None
    if isinstance(value, bool):
        value = {} if value else {"not": {}}
    if not isinstance(value, dict):
        raise _bad("json", value, "must be a JSON schema object (a dict or its JSON text)")
    try:
        size = len(json.dumps(value))
    except (TypeError, ValueError, RecursionError) as exc:
        raise _bad("json", "...", f"cannot be written as JSON ({exc})") from None
    if size > MAX_SPEC_CHARS:
        raise _bad("json", "...", f"the schema is longer than {MAX_SPEC_CHARS} characters")
    return value


def _choice(value):
    if not isinstance(value, (list, tuple)) or not value:
        raise _bad("choice", value, "must be a non-empty list of strings")
    if not all(isinstance(c, str) and c for c in value):
        raise _bad("choice", value, "entries must be non-empty strings")
    return tuple(value)


def _bad(name, value, why):
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return InvalidArgument(f"structured_outputs.{name}: {why} (got {shown})" if name != "structured_outputs"
                           else f"structured_outputs: {why}", parameter=f"structured_outputs.{name}"
                           if name != "structured_outputs" else name, value=value)
