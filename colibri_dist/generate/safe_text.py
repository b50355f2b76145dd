"""Text at the tokenizer's edge and the limits of chat-template rendering (issue 21 items 5, 6, 7, 12).

Role in the data flow: every place that hands text to a tokenizer (api.encode_prompt, the job rows,
token-classification rows, the detokenizer, tokenizer.json loading) goes through safe_encode /
safe_decode / tokenizer_call here, so that a lone surrogate (what Python makes of an undecodable byte in
argv, or a JSON "\\udcff" escape), a Rust panic (pyo3's PanicException is a BaseException, not an
Exception) or any exception of the tokenizer becomes one error naming the request / row / file, while
KeyboardInterrupt and SystemExit still propagate. TemplateLimits is the setting chat.py renders under
(template_process.py's worker processes enforce it).
"""
import math
import re
from dataclasses import dataclass, field

from ..errors import InvalidArgument

FATAL = (KeyboardInterrupt, SystemExit, GeneratorExit)   # never turned into a request's error
DEFAULT_TIMEOUT_S = 2.0
DEFAULT_MAX_CHARS = 4 << 20
_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_REASON = 500


@dataclass(frozen=True)
class TemplateLimits:
    """Bounds of one chat-template rendering: wall time (the worker process is killed) and the characters of
    the text written; the worker's memory cap follows max_chars (template_process.memory_allowance)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_chars: int = DEFAULT_MAX_CHARS
    names: tuple = field(default=("TemplateLimits.timeout_s", "TemplateLimits.max_chars"), compare=False,
                         repr=False)        # the setting an overrun message points to

    def __post_init__(self):
        t, m = self.timeout_s, self.max_chars
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise InvalidArgument(f"{self.names[0]}: expected a positive number of seconds, got {t!r}")
        if isinstance(m, bool) or not isinstance(m, int) or m <= 0:
            raise InvalidArgument(f"{self.names[1]}: expected a positive integer, got {m!r}")

    @classmethod
    def from_settings(cls, obj, section, prefix="chat_template_"):
        """From obj.<prefix>timeout_s / obj.<prefix>max_chars (defaults when absent), overruns naming
        `section.<prefix>...` (e.g. job.chat_template_max_chars)."""
        keys = (f"{prefix}timeout_s", f"{prefix}max_chars")
        return cls(getattr(obj, keys[0], DEFAULT_TIMEOUT_S), getattr(obj, keys[1], DEFAULT_MAX_CHARS),
                   names=tuple(f"{section}.{k}" for k in keys))


def is_fatal(exc):
    return isinstance(exc, FATAL)


def describe(exc):
    """'Type: message' of any exception, even one whose str() raises; long messages are cut."""
    try:
        text = str(exc)
    except Exception:                  # noqa: BLE001 - a hostile __str__
        text = "<unprintable>"
    text = text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failure_reason(exc, doing=""):
    """Why a tokenizer call failed, in words (a Rust panic is named as one)."""
    if type(exc).__name__ == "PanicException":
        return f"the tokenizer panicked{doing} (a bug in it or a damaged tokenizer.json): " + describe(exc).split(
            ": ", 1)[-1]
    return f"the tokenizer failed{doing}: {describe(exc)}"


def check_text(text, what, from_bytes=False, error=InvalidArgument):
    """Refuse a str the tokenizer cannot take (a lone surrogate), naming `what` and the character.
    from_bytes: the text came from bytes decoded with surrogateescape (argv), so name the byte."""
    m = _SURROGATE.search(text)
    if m is None:
        return
    code, pos = ord(m.group()), m.start()
    prefix = f"{what}: " if what else ""
    if from_bytes and 0xDC80 <= code <= 0xDCFF:
        raise error(f"{prefix}byte 0x{code - 0xDC00:02X} at character {pos} is not UTF-8 (pass UTF-8 text)")
    raise error(f"{prefix}lone surrogate U+{code:04X} at character {pos} is not valid Unicode text "
                f"(tokenizers take only valid Unicode; an undecodable byte or a bad \\u escape makes one)")


def safe_encode(tokenizer, text, what, add_special_tokens=True, error=InvalidArgument):
    """tokenizer.encode(text).ids as a list; any failure -> `error` naming `what` (None: no prefix)."""
    check_text(text, what, error=error)
    prefix = f"{what}: " if what else ""
    enc = tokenizer_call(tokenizer.encode, text, add_special_tokens=add_special_tokens,
                         fail=lambda why: error(prefix + why))
    return list(getattr(enc, "ids", enc))


def encode_or_error(tokenizer, text, what, add_special_tokens=True):
    """-> (token ids, None) or (None, InvalidArgument naming `what`)."""
    try:
        return safe_encode(tokenizer, text, what, add_special_tokens), None
    except InvalidArgument as exc:
        return None, exc


class DecodeFailed(InvalidArgument):
    """The tokenizer failed to turn generated token ids into text (the request's error)."""


def safe_decode(tokenizer, ids, skip_special_tokens=True):
    """tokenizer.decode; a failure but an interrupt is DecodeFailed (tokenizer_call's rule, written out: the
    detokenizer calls this twice per generated token)."""
    try:
        return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    except BaseException as exc:       # noqa: B036 - PanicException is a BaseException
        if is_fatal(exc):
            raise
        raise DecodeFailed(failure_reason(exc, " while decoding")) from None


def tokenizer_call(fn, *args, fail, doing="", **kwargs):
    """fn(*args, **kwargs); any failure but an interrupt -> raise fail(reason in words)."""
    try:
        return fn(*args, **kwargs)
    except BaseException as exc:       # noqa: B036 - PanicException is a BaseException
        if is_fatal(exc):
            raise
        raise fail(failure_reason(exc, doing)) from None
