"""Request bodies -> validated plain values: the field tables of /v1/completions and /v1/chat/completions.

Role in the data flow: app.py hands the parsed JSON object here; every field is checked against its row
of a table (type, bounds) and a 400 names the parameter otherwise; unknown keys are refused by name.
The result is a CompletionRequest / ChatRequest: the prompt(s) or messages, the protocol switches
(stream, echo, logprobs format) and `sampling`, a dict of SamplingParams fields holding ONLY what the
client set (so the engine's defaults, e.g. the model's generation_config, apply to the rest).
"""
import math
from dataclasses import dataclass, field

from ..generate.params import MAX_LOGPROBS
from .errors import APIError, bad_param
from .response_format import structured_outputs_of
from .tools import choice as tool_choice
from .tools import request as tool_request

INT64 = (1 << 63) - 1


# ------------------------------------------------------------------ checkers (value -> value or raise)
def _int(lo, hi):
    def check(name, v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise bad_param(name, f"expected an integer, got {_kind(v)}")
        if not lo <= v <= hi:
            raise bad_param(name, f"must be in [{lo}, {hi}], got {_short(v)}")
        return v
    return check


def _num(lo, hi, lo_open=False):
    def check(name, v):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise bad_param(name, f"expected a finite number, got {_kind(v)}")
        if v < lo or v > hi or (lo_open and v == lo):
            raise bad_param(name, f"must be in {'(' if lo_open else '['}{lo}, {hi}], got {_short(v)}")
        return float(v)
    return check


def _bool(name, v):
    if not isinstance(v, bool):
        raise bad_param(name, f"expected true or false, got {_kind(v)}")
    return v


def _stop(name, v):
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or len(items) > 16:
        raise bad_param(name, "expected a string or a list of at most 16 strings")
    for s in items:
        if not isinstance(s, str) or not s or len(s) > 1024:
            raise bad_param(name, "entries must be non-empty strings of at most 1024 characters")
    return list(items)


def _token_list(name, v):
    if not isinstance(v, list) or len(v) > 1024 or not all(_is_token(t) for t in v):
        raise bad_param(name, "expected a list of at most 1024 token ids (integers >= 0)")
    return list(v)


def _absent(name, v):
    if v not in (None, {}, []):
        raise bad_param(name, "is not supported by this server")
    return None


def _stream_options(name, v):
    if not isinstance(v, dict) or set(v) - {"include_usage", "continuous_usage_stats"}:
        raise bad_param(name, "expected {\"include_usage\": bool}")
    return {k: _bool(f"{name}.{k}", x) for k, x in v.items()}


def _str(name, v):
    if not isinstance(v, str) or len(v) > 256:
        raise bad_param(name, "expected a string of at most 256 characters")
    return v


def _ignored(name, v):
    return None


# fields both endpoints share: name -> (checker, SamplingParams field or None)
COMMON = {
    "model": (_str, None), "temperature": (_num(0.0, 100.0), "temperature"),
    "top_p": (_num(0.0, 1.0, lo_open=True), "top_p"), "top_k": (_int(-1, 1 << 30), "top_k"),
    "min_p": (_num(0.0, 1.0), "min_p"), "seed": (_int(0, INT64), "seed"), "stop": (_stop, "stop"),
    "stop_token_ids": (_token_list, "stop_token_ids"), "n": (_int(1, 1 << 20), None),
    "presence_penalty": (_num(-2.0, 2.0), "presence_penalty"),
    "frequency_penalty": (_num(-2.0, 2.0), "frequency_penalty"),
    "repetition_penalty": (_num(0.0, 100.0, lo_open=True), "repetition_penalty"),
    "min_tokens": (_int(0, 1 << 30), "min_tokens"), "ignore_eos": (_bool, "ignore_eos"),
    "stream": (_bool, None), "stream_options": (_stream_options, None),
    "max_tokens": (_int(0, 1 << 30), None), "skip_special_tokens": (_bool, None),
    "user": (_ignored, None), "best_of": (_int(1, 1 << 20), None), "logit_bias": (_absent, None),
    "metadata": (_ignored, None), "store": (_ignored, None), "service_tier": (_ignored, None),
    "response_format": (None, None), "structured_outputs": (None, None),
}
COMPLETION = dict(COMMON, prompt=(None, None), echo=(_bool, None), logprobs=(_int(0, 1 << 30), None),
                  suffix=(_absent, None))
CHAT = dict(COMMON, messages=(None, None), logprobs=(_bool, None), top_logprobs=(_int(0, 1 << 30), None),
            max_completion_tokens=(_int(0, 1 << 30), None), add_generation_prompt=(_bool, None),
            tools=(None, None), tool_choice=(None, None), functions=(_absent, None),
            parallel_tool_calls=(_bool, None))


@dataclass
class CompletionRequest:
    prompts: list                    # each a str or a list of token ids
    sampling: dict                   # SamplingParams fields the client set
    n: int = 1
    max_tokens: int | None = 16      # None: up to the context (max_seq_len - prompt), as vLLM
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    logprobs: int | None = None      # top-k of the legacy logprobs object (None = no logprobs)
    model: str | None = None


@dataclass
class ChatRequest:
    messages: list
    sampling: dict
    n: int = 1
    max_tokens: int | None = None
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    add_generation_prompt: bool = True
    model: str | None = None
    extra: dict = field(default_factory=dict)
    tools: object = None             # tools/request.py ToolRequest (None: no tools)


def parse_completion(body, max_n, disable_any_whitespace=False, max_logprobs=MAX_LOGPROBS):
    """max_logprobs: the engine's (EngineArgs.max_logprobs), the one limit of logprobs."""
    got = _check_fields(body, COMPLETION, "completions")
    _check_logprobs("logprobs", got, max_logprobs)
    prompts = _prompts(body.get("prompt"))
    req = CompletionRequest(prompts, _sampling(got, COMPLETION), model=got.get("model"))
    _common(req, got, max_n)
    # absent: 16 (OpenAI's, vLLM's); an explicit null: None, the rest of the context (vLLM's)
    req.max_tokens = None if "max_tokens" in body and body["max_tokens"] is None else got.get("max_tokens", 16)
    req.echo = got.get("echo") or False
    req.logprobs = got.get("logprobs")
    _structured(req, body, disable_any_whitespace)
    if req.max_tokens == 0 and not req.echo:
        raise bad_param("max_tokens", "0 is only allowed with echo (prompt logprobs); ask for at least 1 token")
    if req.logprobs is not None:
        req.sampling["logprobs"] = max(1, req.logprobs)
        if req.echo:
            req.sampling["prompt_logprobs"] = max(1, req.logprobs)
    return req


def parse_chat(body, max_n, disable_any_whitespace=False, max_logprobs=MAX_LOGPROBS):
    got = _check_fields(body, CHAT, "chat/completions")
    _check_logprobs("top_logprobs", got, max_logprobs)
    req = ChatRequest(_messages(body.get("messages")), _sampling(got, CHAT), model=got.get("model"))
    _common(req, got, max_n)
    if "max_tokens" in got and "max_completion_tokens" in got and got["max_tokens"] != got["max_completion_tokens"]:
        raise bad_param("max_completion_tokens", "differs from max_tokens; send one of them")
    req.max_tokens = got.get("max_completion_tokens", got.get("max_tokens"))
    if req.max_tokens == 0:
        raise bad_param("max_tokens", "must be >= 1")
    req.logprobs = got.get("logprobs") or False
    req.top_logprobs = got.get("top_logprobs") or 0
    if req.top_logprobs and not req.logprobs:
        raise bad_param("top_logprobs", "needs logprobs: true")
    if req.logprobs:
        req.sampling["logprobs"] = max(1, req.top_logprobs)
    req.add_generation_prompt = got.get("add_generation_prompt", True)
    _structured(req, body, disable_any_whitespace)
    _tools(req, body, disable_any_whitespace)          # after: a tool choice's schema wins (vLLM)
    return req


def _structured(req, body, disable_any_whitespace):
    so = structured_outputs_of(body, disable_any_whitespace)
    if so is not None:
        req.sampling["structured_outputs"] = so


def _tools(req, body, disable_any_whitespace=False):
    """tools / tool_choice / parallel_tool_calls -> req.tools; "required" and a named function constrain
    the output to their JSON schema (structured outputs, as vLLM does)."""
    req.tools = tool_request.of_body(body)
    spec = tool_choice.schema(req.tools) if req.tools is not None else None
    if spec is not None:
        req.sampling["structured_outputs"] = {"json": spec, "disable_any_whitespace": disable_any_whitespace}


def _check_logprobs(name, got, max_logprobs):
    if got.get(name, 0) > max_logprobs:
        raise bad_param(name, f"must be <= {max_logprobs} (the engine's max_logprobs, vLLM's; --max-logprobs), "
                              f"got {got[name]}")


def _check_fields(body, table, where):
    if not isinstance(body, dict):
        raise APIError(400, f"the body of /v1/{where} must be a JSON object, got {_kind(body)}")
    unknown = sorted(k for k in body if k not in table)
    if unknown:
        raise bad_param(unknown[0], f"unknown parameter for /v1/{where}")
    got = {}
    for name, value in body.items():
        check = table[name][0]
        if value is None or check is None:
            continue                 # null = not set (OpenAI clients send explicit nulls)
        out = check(name, value)
        if out is not None:
            got[name] = out
    return got


def _sampling(got, table):
    return {table[k][1]: v for k, v in got.items() if table[k][1] is not None}


def _common(req, got, max_n):
    req.n = got.get("n", 1)
    if req.n > max_n:
        raise bad_param("n", f"must be <= {max_n} (the server's --max-n), got {req.n}")
    if got.get("best_of", req.n) != req.n:
        raise bad_param("best_of", "only best_of == n is supported")
    if req.n > 1:
        req.sampling["n"] = req.n
    req.stream = got.get("stream", False)
    opts = got.get("stream_options")
    if opts is not None and not req.stream:
        raise bad_param("stream_options", "only allowed with stream: true")
    req.include_usage = bool(opts and opts.get("include_usage"))
    if got.get("skip_special_tokens") is False:
        raise bad_param("skip_special_tokens", "false is not supported")


def _prompts(p):
    """str | [str] | [int] | [[int]] -> list of str / token-id lists."""
    if p is None:
        raise bad_param("prompt", "is required")
    if isinstance(p, str):
        return [p]
    if not isinstance(p, list) or not p:
        raise bad_param("prompt", "expected a string, a list of strings, token ids or a list of token id lists")
    if all(_is_token(t) for t in p):
        return [list(p)]
    out = []
    for i, item in enumerate(p):
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list) and item and all(_is_token(t) for t in item):
            out.append(list(item))
        else:
            raise bad_param("prompt", f"entry {i} must be a string or a non-empty list of token ids (integers >= 0)")
    return out


def _messages(msgs):
    if not isinstance(msgs, list) or not msgs:
        raise bad_param("messages", "expected a non-empty list of {\"role\", \"content\"} objects")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad_param("messages", f"entry {i} must be an object with a string role")
        content = m.get("content")
        if isinstance(content, list):       # [{"type": "text", "text": ...}, ...]
            if not all(isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str)
                       for c in content):
                raise bad_param("messages", f"entry {i}: only text content parts are supported")
            content = "".join(c["text"] for c in content)
        elif content is not None and not isinstance(content, str):
            raise bad_param("messages", f"entry {i}: content must be a string or a list of text parts")
        extra = {k: v for k, v in m.items() if k in ("name", "tool_call_id", "reasoning_content") and isinstance(v, str)}
        if m.get("tool_calls") is not None:
            extra["tool_calls"] = tool_request.message_tool_calls(i, m["tool_calls"])
        out.append({"role": m["role"], "content": content if content is not None else "", **extra})
    return out


def _is_token(t):
    return isinstance(t, int) and not isinstance(t, bool) and 0 <= t < (1 << 31)


def _kind(v):
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__)


def _short(v):
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."
