"""ChoiceShaper: one chat choice's generated text -> the assistant message's fields (`reasoning_content`,
`content`, `tool_calls`) and its finish_reason, worked out as the text comes.

Role in the data flow: generation.py keeps one per choice when the request has tools or the server a
reasoning parser (otherwise the text is the content, untouched). A stream sends what each `feed` /
`finish` returns as the chunk's delta; a whole response feeds the whole text once and `message` joins the
two, so both say the same. Order, as in vLLM: reasoning first (reasoning.py), then, on the content after
it, the tool choice: "auto" parses calls (tools/stream.py), a named function takes the whole content as
its arguments, "required" reads the content as a JSON array of calls (tools/choice.py); "none" leaves it.
"""
from . import reasoning as rsn
from .errors import APIError, bad_param
from .response_format import check_compiles as check_schema
from .tools import PARSERS
from .tools import choice as tool_choice
from .tools.stream import CallStream, new_call


def check(state, req):
    """400 (naming tools) when the request wants calls parsed and this server has no parser for them. With a
    reasoning parser, a constrained output starts after the end of thinking (vLLM's rule): the model thinks
    freely, the schema holds the content (StructuredOutputsParams.start_after)."""
    so = req.sampling.get("structured_outputs")
    if so is not None and state.reasoning is not None:
        so["start_after"] = state.reasoning[1]
    if req.tools is not None and req.tools.choice == "auto" and state.tool_parser is None:
        raise bad_param("tools", "\"auto\" tool choice needs a tool-call parser: this model's family has none "
                                 f"known, so start the server with --tool-call-parser {{{','.join(sorted(PARSERS))}}}")


def check_compiles(state, req):
    """The request's structured outputs compiled (response_format.check_compiles); when a tool choice set
    them, what does not compile is a 400 naming tools, where the client wrote the schema."""
    try:
        check_schema(state.info, req.sampling.get("structured_outputs"))
    except APIError as exc:
        if req.tools is None or req.tools.choice not in ("required", "named"):
            raise
        raise bad_param("tools", f"the schema tool_choice {req.tools.choice!r} asks for: {exc.message}") from None


def shaper_for(state, req):
    """A new ChoiceShaper for one choice of req, or None when the text is simply the content."""
    choice = req.tools.choice if req.tools is not None else "none"
    think = state.reasoning                   # a constrained output's schema starts after it (check above)
    if think is None and choice == "none":
        return None
    return ChoiceShaper(think, state.tool_parser, req.tools)


class ChoiceShaper:
    def __init__(self, think_markers, parser, treq):
        self.think = rsn.ThinkStream(think_markers) if think_markers else None
        self.treq = treq
        self.mode = treq.choice if treq is not None else "none"      # none | auto | named | required
        self.calls = CallStream(parser, treq.tools, treq.parallel) if self.mode == "auto" else None
        self.held, self.called = [], False

    def feed(self, text):
        """-> the delta fields this piece of text makes known."""
        reasoning, content = self.think.feed(text) if self.think else ("", text)
        return _fields(reasoning, *self._content(content))

    def finish(self, reason):
        """-> (the delta fields of what was held back, the choice's finish_reason)."""
        reasoning, content = self.think.finish() if self.think else ("", "")
        c1, calls1 = self._content(content)
        c2, calls2 = self._flush()
        return _fields(reasoning, c1 + c2, calls1 + calls2), self._reason(reason)

    def message(self, text, reason):
        """-> (the whole message's fields, finish_reason) of a choice's whole text."""
        first = self.feed(text)
        rest, reason = self.finish(reason)
        joined = join(first, rest)
        out = {"content": joined.get("content") or None}
        if self.think is not None:
            out["reasoning_content"] = joined.get("reasoning_content") or None
        if joined.get("tool_calls"):
            out["tool_calls"] = _whole_calls(joined["tool_calls"])
        return out, reason

    def _content(self, text):
        if self.mode == "auto":
            return self.calls.feed(text)
        if self.mode == "required":
            self.held.append(text)
            return "", []
        if self.mode == "named" and text:
            first, self.called = not self.called, True
            return "", [new_call(0, self.treq.name, text) if first else {"index": 0, "function": {"arguments": text}}]
        return ("", []) if self.mode == "named" else (text, [])

    def _flush(self):
        if self.mode == "auto":
            return self.calls.finish()
        if self.mode == "named" and not self.called:
            self.called = True
            return "", [new_call(0, self.treq.name, "")]
        if self.mode == "required":
            text = "".join(self.held)
            found = tool_choice.required_calls(text, self.treq.tools)
            if found is None:                   # not constrained (no sampler masking yet): it stays content
                return text, []
            self.called = True
            return "", [new_call(i, name, args) for i, (name, args) in enumerate(found)]
        return "", []

    def _reason(self, reason):
        if self.mode == "auto" and self.calls.count:
            return "tool_calls"
        if self.mode == "required" and self.called and reason == "stop":
            return "tool_calls"
        return reason


def _fields(reasoning, content, calls):
    out = {}
    if reasoning:
        out["reasoning_content"] = reasoning
    if content:
        out["content"] = content
    if calls:
        out["tool_calls"] = calls
    return out


def join(a, b):
    """Two deltas' fields as one (texts joined, tool call deltas one after the other)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, [] if k == "tool_calls" else "") + v
    return out


def _whole_calls(deltas):
    """Tool call deltas -> the message's calls (a call's argument fragments joined; index dropped)."""
    calls = {}
    for d in deltas:
        c = calls.setdefault(d["index"], {"id": d.get("id"), "type": "function",
                                          "function": {"name": d["function"].get("name"), "arguments": ""}})
        c["function"]["arguments"] += d["function"].get("arguments", "")
    return [calls[i] for i in sorted(calls)]
