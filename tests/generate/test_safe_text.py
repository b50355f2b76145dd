"""Text a tokenizer rejects and tokenizers that panic or raise (issue 21 items 6 and 12).

A lone surrogate in a prompt or a message (what Python makes of invalid UTF-8 bytes in argv, or a JSON
"\\udcff" escape) is that request's error naming the request and the character; a tokenizer that panics
(pyo3's PanicException is a BaseException) or raises on one text is that request's error; the other requests
in the call go on; KeyboardInterrupt and SystemExit still propagate; a tokenizer.json that panics at load is a
FormatError naming the file.
"""
import io
import re
import json

import pytest

from colibri_dist.errors import FormatError, InvalidArgument
from colibri_dist.generate import SamplingParams
from colibri_dist.generate.api import chat, generate, score
from colibri_dist.generate.chat import ChatTemplate
from colibri_dist.generate.safe_text import check_text, safe_encode

from gen_fake_model import FakeStepModel
from gen_hostile_tokenizers import (PANIC_AT_LOAD, RaisingTokenizer, charsmap_tokenizer_json, panic_exception_class,
                                    panicky)
from gen_tokenizers import byte_level_bpe

BPE = byte_level_bpe()
SP = SamplingParams(max_tokens=3, temperature=0)


def _model(tok):
    return FakeStepModel(vocab_size=tok.get_vocab_size())


@pytest.mark.parametrize("bad, shown", [("\udcff", "U+DCFF"), ("ok \ud800 x", "U+D800"), ("\udfff", "U+DFFF"),
                                        ("a" * 1000 + "\udc80", "U+DC80")])
def test_lone_surrogate_is_that_requests_error(bad, shown):
    good = ["one two", "héllo 日本語 🙂"]
    alone = generate(_model(BPE), BPE, good, SP)
    out = generate(_model(BPE), BPE, [good[0], bad, good[1]], SP, request_ids=["a", "b", "c"])
    msg = str(out[1].error)
    assert isinstance(out[1].error, InvalidArgument) and msg.startswith("request 'b': ") and shown in msg, msg
    assert "not valid Unicode" in msg and out[1].token_ids == []
    assert [o.token_ids for o in (out[0], out[2])] == [o.token_ids for o in alone]
    s = score(_model(BPE), BPE, [good[0], bad])
    assert s[0].error is None and shown in str(s[1].error) and "request '1'" in str(s[1].error)
    t = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    c = chat(_model(BPE), BPE, t, [[{"role": "user", "content": good[0]}], [{"role": "user", "content": bad}]], SP)
    assert c[0].error is None and shown in str(c[1].error) and "request '1'" in str(c[1].error)


def test_surrogate_escaped_bytes_are_named_as_bytes():
    with pytest.raises(InvalidArgument, match=r"PROMPT: .*byte 0xFF .*not UTF-8"):
        check_text("ab\udcff", "PROMPT", from_bytes=True)
    check_text("NUL \x00 BOM \ufeff RTL \u202e combining e\u0301 nonchar \uffff \U0010ffff", "PROMPT")


def test_cli_prompt_with_invalid_utf8_is_a_usage_error(monkeypatch, capsys):
    """`colibri generate MODEL $'\\xff'`: Python hands the byte over as U+DCFF (surrogateescape)."""
    from colibri_dist.cli import main
    from gen_fake_llm import FakeLLM
    monkeypatch.setattr("colibri_dist.cli.generate.open_llm", lambda args: FakeLLM())
    assert main(["generate", "m.colibri", "caf\udcff"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("colibri: error: PROMPT: ") and "byte 0xFF" in err and len(err.splitlines()) == 1
    assert main(["generate", "m.colibri", "x", "--chat", "--system", "\udce9"]) == 2
    assert "--system: " in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"one \xff two"), encoding="utf-8"))
    assert main(["generate", "m.colibri", "-"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("colibri: error: PROMPT (stdin): ") and len(err.splitlines()) == 1


def test_a_panicking_tokenizer_fails_only_that_request():
    tok = panicky()
    PanicException = panic_exception_class()
    assert not issubclass(PanicException, Exception)          # why a plain `except Exception` missed it
    out = generate(_model(tok), tok, ["one two", "one ☠ two", "three"], SP)
    assert out[0].error is None and out[2].error is None and len(out[2].token_ids) == 3
    msg = str(out[1].error)
    assert msg.startswith("request '1': the tokenizer panicked") and "index out of bounds" in msg, msg
    s = score(_model(tok), tok, ["日本", "one two"])
    assert "panicked" in str(s[0].error) and s[1].error is None
    t = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    c = chat(_model(tok), tok, t, [[{"role": "user", "content": "🙂"}], [{"role": "user", "content": "one"}]], SP)
    assert "request '0': the tokenizer panicked" in str(c[0].error) and c[1].error is None
    assert tok.encode("one two").ids == [2, 3]                # still usable after the panic


def _panic():
    return panic_exception_class()("boom from rust")


@pytest.mark.parametrize("make, name", [
    (lambda: ValueError("v"), "ValueError"), (lambda: RuntimeError("r"), "RuntimeError"),
    (lambda: MemoryError(), "MemoryError"), (lambda: Exception("plain"), "Exception"),
    (lambda: TypeError("TextInputSequence must be str"), "TypeError"), (_panic, "panicked"),
    (lambda: RecursionError("deep"), "RecursionError"), (lambda: UnicodeError("u"), "UnicodeError"),
], ids=["value", "runtime", "memory", "plain", "type", "panic", "recursion", "unicode"])
def test_any_tokenizer_failure_is_that_requests_error(make, name):
    tok = RaisingTokenizer(BPE, make)
    out = generate(_model(tok), tok, ["one", "x boom y", "two"], SP)
    assert out[0].error is None and out[2].error is None
    assert "request '1': " in str(out[1].error) and name in str(out[1].error)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_interrupts_from_the_tokenizer_propagate(exc):
    tok = RaisingTokenizer(BPE, exc)
    with pytest.raises(exc):
        generate(_model(tok), tok, ["one", "boom"], SP)
    with pytest.raises(exc):
        safe_encode(tok, "boom", "request 0")


def test_a_decoder_failure_is_that_requests_error():
    long = SamplingParams(max_tokens=6, temperature=0)
    ref = generate(_model(BPE), BPE, ["one two", "the quick"], long)
    bad = ref[0].token_ids[2]
    tok = RaisingTokenizer(BPE, _panic, marker=None, bad_id=bad)
    out = generate(_model(BPE), tok, ["one two", "the quick"], long)
    cut = ref[0].token_ids.index(bad) + 1
    assert "request '0': the tokenizer panicked" in str(out[0].error) and out[0].token_ids == ref[0].token_ids[:cut]
    if bad not in ref[1].token_ids:
        assert out[1].error is None and out[1].token_ids == ref[1].token_ids and out[1].text == ref[1].text


def test_a_tokenizer_json_that_panics_at_load_is_a_format_error(tmp_path):
    from colibri_dist.model.tokenizer import load_tokenizer
    with pytest.raises(FormatError, match=r"m.colibri: tokenizer.json inside the container cannot be loaded.*panicked"):
        load_tokenizer({"tokenizer.json": charsmap_tokenizer_json(PANIC_AT_LOAD)}, "m.colibri")
    from colibri_dist.jobs.token_classification import load_tokenizer as job_tokenizer
    path = tmp_path / "tokenizer.json"
    path.write_text(charsmap_tokenizer_json(PANIC_AT_LOAD))
    with pytest.raises(FormatError, match=rf"{path}: cannot load tokenizer.*panicked"):
        job_tokenizer(str(path))


def test_token_classification_text_the_tokenizer_rejects_names_file_and_line(tmp_path):
    from types import SimpleNamespace

    from colibri_dist.jobs.run.shards import Shard
    from colibri_dist.jobs.token_classification import TokenClassification
    kind = TokenClassification.__new__(TokenClassification)
    kind.job = SimpleNamespace(input_format="text", ids_field="input_ids", text_field="text", id_field="id")
    kind.head = SimpleNamespace(vocab_size=10 ** 6)
    for tok, text, want in ((BPE, "a\udcffb", "U+DCFF"), (panicky(), "☠", "panicked")):
        kind._tokenizer = tok
        path = tmp_path / "in.jsonl"
        path.write_text(json.dumps({"id": 1, "text": "one"}) + "\n" + json.dumps({"id": 2, "text": text}) + "\n")
        with pytest.raises(FormatError, match=rf"{path}:2: .*{re.escape(want)}"):
            kind.read_rows(Shard("s", str(path), 0, 2))
