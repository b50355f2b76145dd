"""Seeded fuzzing of hostile text (issue 21, "extend the fuzz suites"): chat templates (time and size bounds,
every Python exception a template can raise), tokenizer files that panic and tokenizers that raise, and
request / job text with every unicode edge case (lone surrogates, NUL, BOM, RTL marks, combining sequences,
non-characters, very long lines, invalid UTF-8 bytes in JSONL input).

hypothesis with derandomize=True and fixed example counts: the same cases on every run, seconds in all. Every
case ends in a result or one InvalidArgument / FormatError naming the request, row or file, never another
exception, a hang or an unbounded string.
"""
import builtins
import json
import os
import shutil
import struct
import tempfile
import atexit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colibri_dist.errors import FormatError, InvalidArgument
from colibri_dist.generate import SamplingParams
from colibri_dist.generate.api import chat, generate
from colibri_dist.generate.chat import ChatTemplate
from colibri_dist.generate.safe_text import TemplateLimits, safe_encode
from colibri_dist.jobs.generation.rows import RowReader
from colibri_dist.jobs.run.shards import Shard

from gen_fake_llm import FakeLLM
from gen_fake_model import FakeStepModel
from gen_hostile_tokenizers import charsmap_tokenizer_json
from gen_tokenizers import ALL as TOKENIZERS

FUZZ = settings(max_examples=80, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
WORK = tempfile.mkdtemp(prefix="colibri-text-fuzz-")
atexit.register(shutil.rmtree, WORK, True)
TOKS = {name: make() for name, make in TOKENIZERS.items()}

# ---------------------------------------------------------------- chat templates: bounds

NUMS = st.sampled_from(["0", "1", "3", "7", "1000", "100000", "10 ** 9", "3000000000", "-2", "(10 ** 12)"])
LEAVES = st.one_of(NUMS, st.sampled_from(["'x'", "'ab\\n'", "''", "messages[0].content", "ns.s", "ns.l", "[1, 2]",
                                          "range(1000)|list", "messages", "none", "1.5", "'{:>9}'", "'%5s'",
                                          "loop", "i", "m"]))


def _exprs(inner):
    return st.one_of(
        st.tuples(inner, st.sampled_from(["~", "+", "*", "**", "//", "%", "-", "==", "in"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(inner, st.sampled_from(["center", "indent", "batch", "slice", "join", "replace", "tojson",
                                          "wordwrap", "sum", "string", "list", "upper", "length", "int", "first",
                                          "format", "truncate", "unique", "sort", "urlize", "map"]), inner).map(
            lambda t: f"({t[0]}|{t[1]}({t[2]}))" if t[1] not in ("string", "list", "upper", "length", "int",
                                                                 "first", "unique", "sort")
            else f"({t[0]}|{t[1]})"),
        st.tuples(inner, st.sampled_from(["center", "zfill", "replace", "join", "format", "expandtabs",
                                          "split", "ljust", "translate"]), inner).map(
            lambda t: f"{t[0]}.{t[1]}({t[2]})"),
        st.tuples(inner, inner).map(lambda t: f"[{t[0]}, {t[1]}]"),
        st.tuples(inner, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
    )


EXPRS = st.recursive(LEAVES, _exprs, max_leaves=6)


def _stmts(inner):
    return st.one_of(
        st.tuples(NUMS, inner).map(lambda t: f"{{% for i in range({t[0]}) %}}{t[1]}{{% endfor %}}"),
        st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
        st.tuples(EXPRS, inner).map(lambda t: f"{{% if {t[0]} %}}{t[1]}{{% endif %}}"),
        inner.map(lambda s: f"{{% filter upper %}}{s}{{% endfilter %}}"),
        inner.map(lambda s: f"{{% macro f(n) %}}{s}{{{{ f(n) }}}}{{% endmacro %}}{{{{ f(1) }}}}"),
        inner.map(lambda s: f"{{% for m in messages %}}{s}{{% endfor %}}"),
        inner.map(lambda s: f"{{% set r %}}{s}{{% endset %}}{{{{ r ~ r }}}}"),
    )


STMTS = st.recursive(st.one_of(EXPRS.map(lambda e: f"{{{{ {e} }}}}"),
                               EXPRS.map(lambda e: f"{{% set ns.s = {e} %}}"),
                               EXPRS.map(lambda e: f"{{% set ns.l = [ns.l, {e}] %}}"),
                               st.just("text")), _stmts, max_leaves=5)
BOUNDS = TemplateLimits(timeout_s=0.05, max_chars=5000)
CONV = [{"role": "user", "content": "héllo\n" * 5}, {"role": "assistant", "content": "ok"}]


def _render_or_error(text):
    try:
        t = ChatTemplate("{% set ns = namespace(s='ab', l=[]) %}" + text, source="fuzz.jinja")
        out = t.render(CONV, limits=BOUNDS)
    except InvalidArgument as exc:
        assert str(exc).startswith("fuzz.jinja: chat template"), str(exc)[:300]
        return None
    assert isinstance(out, str) and len(out) <= BOUNDS.max_chars
    return out


@FUZZ
@given(STMTS)
def test_templates_end_in_bounded_text_or_one_error(text):
    _render_or_error(text)


@settings(max_examples=40, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(STMTS, st.integers(0, 200), st.sampled_from(["{%", "%}", "{{", "}}", "(", ")", "|", "'", "*", "[", "~"]))
def test_broken_templates_are_one_error(text, at, bit):
    _render_or_error(text[:at] + bit + text[at:])


# ---------------------------------------------------------------- chat templates: every exception class


def _exception_classes():
    seen, todo = [], [Exception]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(c for c in cls.__subclasses__() if c.__module__ == "builtins")
    return sorted({c for c in seen if getattr(builtins, c.__name__, None) is c}, key=lambda c: c.__name__)


def _make(cls):
    for args in (("boom",), ("boom", [ValueError("inner")]), ("utf-8", b"x", 0, 1, "bad"), ("utf-8", "x", 0, 1, "bad"),
                 ("x", 0, 1, "bad"),
                 ()):
        try:
            return cls(*args)
        except TypeError:
            continue
    raise AssertionError(f"cannot build {cls}")


class _Hostile:
    """A message value that raises `exc` from whatever the template does with it."""

    def __init__(self, exc):
        self.exc = exc

    def _raise(self, *args):
        raise self.exc
    __str__ = __iter__ = __len__ = __eq__ = __lt__ = __add__ = __getitem__ = __bool__ = _raise
    __hash__ = object.__hash__


USES = ["{{ m.content }}", "{% for c in m.content %}{% endfor %}", "{{ m.content|length }}",
        "{{ m.content == 'x' }}", "{{ m.content + 'x' }}", "{{ m.content[0] }}", "{% if m.content %}{% endif %}",
        "{{ [m.content, 'x']|sort }}", "{{ m.content|tojson }}", "{{ m.content ~ '' }}"]
CLASSES = _exception_classes()


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_builtin_exception_class_is_a_request_error(cls):
    assert len(CLASSES) > 50
    tok = TOKS["byte_level_bpe"]
    model = FakeStepModel(vocab_size=tok.get_vocab_size())
    for use in USES:
        t = ChatTemplate("{% for m in messages %}" + use + "{% endfor %}x", source="m.colibri")
        convs = [[{"role": "user", "content": "ok"}], [{"role": "user", "content": _Hostile(_make(cls))}]]
        out = chat(model, tok, t, convs, SamplingParams(max_tokens=2, temperature=0))
        assert out[0].error is None, (use, out[0].error)
        err = out[1].error           # the worker takes JSON data only: the object never reaches the template
        assert isinstance(err, InvalidArgument) and str(err).startswith(
            "request '1': m.colibri: chat template input must be JSON data"), (use, err)


# ---------------------------------------------------------------- request text: unicode edge cases

EDGE = ["\x00", "\ufeff", "\u202e", "\u202d", "\u200f", "\u200e", "\u2066", "\u0301", "e\u0301\u0327", "\ufffe",
        "\uffff", "\U0001fffe", "\U0010ffff", "\ufffd", "\ud800", "\udbff", "\udc00", "\udcff", "\udfff", "\r\n",
        "\u2028", "\u00a0", "日本", "🙂", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "ß", "İ", "\x7f",
        "\x1b[31m",
        " " * 300, "a" * 3000]
TEXT = st.lists(st.one_of(st.sampled_from(EDGE), st.text(st.characters(exclude_categories=()), max_size=6)),
                max_size=6).map("".join)


def _has_surrogate(text):
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


@settings(max_examples=50, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(TOKS)), st.lists(TEXT, min_size=1, max_size=4))
def test_request_text_is_ids_or_that_requests_error(name, texts):
    tok = TOKS[name]
    model = FakeStepModel(vocab_size=tok.get_vocab_size(), max_seq_len=100000)
    out = generate(model, tok, texts, SamplingParams(max_tokens=2, temperature=0))
    for i, (text, c) in enumerate(zip(texts, out)):
        if _has_surrogate(text):
            assert "not valid Unicode" in str(c.error) and str(c.error).startswith(f"request '{i}': ")
        elif c.error is not None:
            assert str(c.error).startswith(f"request '{i}': ") and isinstance(c.error, InvalidArgument)
            assert "empty prompt" in str(c.error) or "panicked" in str(c.error), str(c.error)[:200]
        else:
            assert c.prompt_token_ids == safe_encode(tok, text, f"request {i}")
            assert not _has_surrogate(c.text)
            solo = generate(model, tok, [text], SamplingParams(max_tokens=2, temperature=0))[0]
            assert solo.token_ids == c.token_ids


# ---------------------------------------------------------------- job text: JSONL with every edge case


def _job(**kw):
    from colibri_dist.config import JobSection
    return JobSection(kind="generate", **kw)


JOB_LLM = FakeLLM()
JOB_READER = RowReader(_job(), "generate", JOB_LLM.tokenizer, JOB_LLM.chat_template)
ROW_VALUES = st.one_of(TEXT, st.none(), st.integers(-5, 5), st.lists(TEXT, max_size=2))
ROWS = st.fixed_dictionaries({}, optional={
    "id": st.one_of(TEXT, st.integers(-3, 3)), "prompt": ROW_VALUES,
    "messages": st.one_of(st.lists(st.fixed_dictionaries({"role": st.one_of(st.sampled_from(["user", "system"]), TEXT),
                                                          "content": ROW_VALUES}), max_size=3), ROW_VALUES)})


@FUZZ
@given(st.lists(ROWS, min_size=1, max_size=5), st.lists(st.tuples(st.integers(0, 400), st.binary(min_size=1,
                                                                                               max_size=3)),
                                                         max_size=3))
def test_jsonl_rows_are_prompts_or_row_errors(rows, corruptions):
    data = bytearray(b"".join((json.dumps(r) + "\n").encode() for r in rows))
    for at, junk in corruptions:                      # invalid UTF-8 (or any bytes) inside the lines
        at = min(at, len(data))
        data[at:at] = junk.replace(b"\n", b"\xff")
    path = os.path.join(WORK, "in.jsonl")
    with open(path, "wb") as fh:
        fh.write(bytes(data))
    llm, reader = JOB_LLM, JOB_READER
    n = sum(1 for line in bytes(data).split(b"\n") if line.strip())
    got = reader.read(Shard("s", path, 0, n))
    assert len(got) == n
    for row in got:
        assert (row.error is None) != (row.prompt_ids is None), row
        assert row.error is None or isinstance(row.error, str) and row.error
        json.dumps({"id": row.id, "error": row.error}, default=str)     # the output row always serializes
    good = [r for r in got if r.error is None and r.prompt_ids]
    if good:
        out = llm.generate([r.prompt_ids for r in good], [r.params for r in good])
        assert len(out) == len(good)


# ---------------------------------------------------------------- tokenizer files that panic

UNIT = st.one_of(st.just(0), st.integers(0, 2 ** 32 - 1), st.integers(0, 255).map(lambda c: c | (1 << 8)),
                 st.integers(0, 4096).map(lambda o: o << 10))


@settings(max_examples=60, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(UNIT, max_size=300), st.binary(max_size=12), st.integers(-8, 8),
       st.lists(TEXT, min_size=1, max_size=3))
def test_tokenizer_files_that_panic_are_named_errors(units, tail, size_skew, texts):
    from colibri_dist.model.tokenizer import load_tokenizer
    blob = struct.pack("<I", max(0, 4 * len(units) + size_skew)) + struct.pack(f"<{len(units)}I", *units) + tail
    try:
        tok = load_tokenizer({"tokenizer.json": charsmap_tokenizer_json(blob)}, "m.colibri")
    except FormatError as exc:
        assert str(exc).startswith("m.colibri: tokenizer.json inside the container cannot be loaded"), str(exc)
        return
    for i, text in enumerate(texts):
        try:
            ids = safe_encode(tok, text, f"request {i}")
        except InvalidArgument as exc:
            assert str(exc).startswith(f"request {i}: "), str(exc)[:200]
            continue
        assert all(isinstance(t, int) for t in ids)
