"""Hostile text in generate jobs (issue 21 items 5, 6, 7, 12 on the `colibri run` path): a template that raises,
spins or grows, a lone surrogate, a tokenizer that panics; each is that row's `error`, every other row is
written, and the template bounds are job settings (job.chat_template_timeout_s / job.chat_template_max_chars)."""
import json
import os
from types import SimpleNamespace

import pytest

from colibri_dist.config import JobSection, load_config
from colibri_dist.errors import ConfigError
from colibri_dist.generate.safe_text import TemplateLimits
from colibri_dist.jobs.generation.job import GenerateKind
from colibri_dist.jobs.pipeline import run_generation_job

from gen_fake_llm import TEMPLATE, FakeLLM
from gen_hostile_tokenizers import panicky

HOSTILE = TEMPLATE + (
    "{% set c = messages[-1].content %}"
    "{% if c == 'div' %}{{ 1 // 0 }}{% endif %}"
    "{% if c == 'deep' %}{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}{% endif %}"
    "{% if c == 'include' %}{% include 'x' %}{% endif %}"
    "{% if c == 'big' %}{% for i in range(100000) %}{% for j in range(30000) %}x{% endfor %}{% endfor %}{% endif %}"
    "{% if c == 'spin' %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{% endif %}")


def _msg(text):
    return [{"role": "user", "content": text}]


def _job(tmp_path, rows, extra=""):
    os.makedirs(tmp_path / "data", exist_ok=True)
    with open(tmp_path / "data" / "in.jsonl", "wb") as fh:
        for r in rows:
            fh.write(r if isinstance(r, bytes) else (json.dumps(r) + "\n").encode())
    p = tmp_path / "job.yaml"
    p.write_text("job:\n  kind: generate\n  input: data\n  sampling_params: {max_tokens: 4}\n" + extra +
                 "report: {progress: none}\n")
    return load_config(str(p))


def _rows(out):
    with open(os.path.join(out, "in.jsonl"), "rb") as fh:
        return [json.loads(line.decode("utf-8")) for line in fh]


def test_template_failures_are_row_errors(tmp_path):
    names = ["div", "deep", "include", "big", "spin"]
    rows = [{"id": "ok1", "messages": _msg("one two")}] + [{"id": n, "messages": _msg(n)} for n in names] + \
           [{"id": "ok2", "messages": _msg("three")}]
    cfg = _job(tmp_path, rows, "  chat_template_timeout_s: 1\n  chat_template_max_chars: 2000\n")
    rep = run_generation_job(cfg, FakeLLM(template=HOSTILE), out_dir=str(tmp_path / "out"))
    got = {r["id"]: r for r in _rows(tmp_path / "out")}
    assert rep["rows"] == 7 and rep["errors"] == 5 and rep["complete"]
    want = {"div": "ZeroDivisionError", "deep": "RecursionError", "include": "TypeError",
            "big": "more than 2000 characters (job.chat_template_max_chars)",
            "spin": "took longer than 1 s (job.chat_template_timeout_s)"}
    for name, text in want.items():
        assert set(got[name]) == {"id", "error"} and "chat template" in got[name]["error"], got[name]
        assert text in got[name]["error"], got[name]["error"]
    assert got["ok1"]["generated_tokens"] and got["ok2"]["generated_tokens"]


def test_the_job_limits_are_what_the_template_gets(tmp_path):
    rows = [{"id": 1, "messages": _msg("y" * 300)}]
    run_generation_job(_job(tmp_path, rows, "  chat_template_max_chars: 200\n"), FakeLLM(),
                       out_dir=str(tmp_path / "small"))
    assert "more than 200 characters" in _rows(tmp_path / "small")[0]["error"]
    run_generation_job(_job(tmp_path, rows), FakeLLM(), out_dir=str(tmp_path / "default"))
    assert "error" not in _rows(tmp_path / "default")[0]


def test_job_defaults_equal_the_library_defaults():
    job = JobSection(kind="generate")
    assert (job.chat_template_timeout_s, job.chat_template_max_chars) == (TemplateLimits().timeout_s,
                                                                          TemplateLimits().max_chars)


@pytest.mark.parametrize("text, where, msg", [
    ("  chat_template_timeout_s: 0\n", ":5:28:", "job.chat_template_timeout_s: expected a positive number"),
    ("  chat_template_timeout_s: -1.5\n", ":5:28:", "job.chat_template_timeout_s: expected a positive number"),
    ("  chat_template_max_chars: 0\n", ":5:28:", "job.chat_template_max_chars: expected a positive integer"),
    ("  chat_template_max_chars: 1.5\n", ":5:28:", "job.chat_template_max_chars: expected an integer"),
])
def test_limit_settings_are_checked(tmp_path, text, where, msg):
    with pytest.raises(ConfigError) as info:
        _job(tmp_path, [], text)
    assert where in str(info.value) and msg in str(info.value), str(info.value)


def test_unicode_edge_cases_in_rows(tmp_path):
    edge = "NUL\x00 BOM\ufeff RTL\u202e\u200f combining e\u0301\u0327 nonchar \ufffe\uffff\U0010ffff 日本 🙂"
    rows = [{"id": "edge", "prompt": edge}, {"id": "sur", "prompt": "one \udcff two"},
            {"id": "sur-msg", "messages": _msg("\ud800")}, {"id": "edge-msg", "messages": _msg(edge)},
            {"id": "ok", "prompt": "one two"},
            b'{"id": "raw", "prompt": "caf\xe9"}\n', b'{"id": "esc", "prompt": "a\\udfffb"}\n']
    rep = run_generation_job(_job(tmp_path, rows), FakeLLM(), out_dir=str(tmp_path / "out"))
    got = {r["id"] if "id" in r else None: r for r in _rows(tmp_path / "out")}
    assert rep["rows"] == 7 and rep["errors"] == 4
    for name in ("edge", "edge-msg", "ok"):
        assert "error" not in got[name] and got[name]["generated_tokens"], got[name]
    for name, char in (("sur", "U+DCFF"), ("sur-msg", "U+D800"), ("esc", "U+DFFF")):
        assert char in got[name]["error"] and "not valid Unicode" in got[name]["error"], got[name]
    assert "invalid UTF-8 at byte" in got[5]["error"]                  # no id readable: the row's index


def test_a_panicking_tokenizer_fails_only_its_rows(tmp_path):
    llm = FakeLLM()
    llm.tokenizer = panicky()
    rows = [{"id": "a", "prompt": "one two"}, {"id": "b", "prompt": "one ☠"}, {"id": "c", "messages": _msg("🙂")},
            {"id": "d", "prompt": "three four"}]
    rep = run_generation_job(_job(tmp_path, rows), llm, out_dir=str(tmp_path / "out"))
    got = {r["id"]: r for r in _rows(tmp_path / "out")}
    assert rep["errors"] == 2 and got["a"]["generated_tokens"] and got["d"]["generated_tokens"]
    for name in "bc":
        assert got[name]["error"].startswith("the tokenizer panicked") and "index out of bounds" in got[name]["error"]


def test_ray_data_rows_get_the_same_errors():
    from colibri_dist.config import parse_section
    job = parse_section(JobSection, {"kind": "generate", "chat_template_max_chars": 500}, source="t")
    kind = GenerateKind(SimpleNamespace(job=job), FakeLLM(template=HOSTILE))
    out = kind.run_objects([{"id": 1, "messages": _msg("div")}, {"id": 2, "prompt": "\udcff"},
                            {"id": 3, "messages": _msg("big")}, {"id": 4, "prompt": "one"}])
    assert "ZeroDivisionError" in out[0]["error"] and "U+DCFF" in out[1]["error"]
    assert "more than 500 characters" in out[2]["error"] and "error" not in out[3]
