"""Hostile text end to end on a real cd.LLM (issue 21 items 5, 6, 7, 12): the demo language model converted with
a chat template that raises / spins / grows on some contents and a tokenizer.json whose normalizer panics on
characters of 3+ UTF-8 bytes; `colibri run`, `colibri generate` and LLM.generate/chat give each bad row or
request its error and the rest their normal output."""
import json
import os
import subprocess
import sys

import pytest

import colibri_dist as cd
from colibri_dist.cli import main
from colibri_dist.generate.safe_text import TemplateLimits
from colibri_dist.demos import llm as demo_llm

pytest.importorskip("tokenizers")

HOSTILE = ("{% for m in messages %}{% if m.content == 'div' %}{{ 1 // 0 }}{% endif %}"
           "{% if m.content == 'include' %}{% include 'x' %}{% endif %}"
           "{% if m.content == 'big' %}{% for i in range(100000) %}{{ 'x' * 30000 }}{% endfor %}{% endif %}"
           "{% if m.content == 'spin' %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
           "{% endfor %}{% endif %}"
           "{{ m['content'] }}{% if not loop.last %} {% endif %}{% endfor %}")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from gen_hostile_tokenizers import PANIC_AT_E2
    import base64
    root = tmp_path_factory.mktemp("hostile-llm")
    hf = demo_llm.write_checkpoint(str(root / "hf"), layers=2, n_experts=8, chat_template=HOSTILE)
    tok_path = os.path.join(hf, "tokenizer.json")
    tok = json.load(open(tok_path))
    tok["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(PANIC_AT_E2).decode()}
    json.dump(tok, open(tok_path, "w"))
    cd.convert(hf, str(root / "m.colibri"), progress=False)
    return root, str(root / "m.colibri")


def test_colibri_run_writes_every_row(model, capsys):
    root, path = model
    good = demo_llm.prompts(3, max_tokens=4)
    rows = good[:1] + [{"id": "div", "messages": [{"role": "user", "content": "div"}]},
                       {"id": "include", "messages": [{"role": "user", "content": "include"}]},
                       {"id": "big", "messages": [{"role": "user", "content": "big"}]},
                       {"id": "sur", "prompt": "count: one \udcff"},
                       {"id": "panic", "prompt": "count: 日本"}] + good[1:]
    os.makedirs(root / "data", exist_ok=True)
    with open(root / "data" / "in.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    rc = main(["run", "--model", path, "--input", str(root / "data"), "--workers", "0", "--out", str(root / "out"),
               "--progress", "none"])
    assert isinstance(rc, int)
    with open(root / "out" / "in.jsonl", encoding="utf-8") as fh:
        got = {r["id"]: r for r in map(json.loads, fh)}
    assert len(got) == len(rows)
    want = {"div": "ZeroDivisionError", "include": "TypeError", "big": "more than 4194304 characters",
            "sur": "lone surrogate U+DCFF", "panic": "the tokenizer panicked"}
    for name, text in want.items():
        assert text in got[name]["error"], got[name]
    texts = [got[r["id"]]["generated_text"] for r in good]
    assert demo_llm.task_accuracy(good, texts)["accuracy"] == 1.0


def test_llm_generate_and_chat_keep_the_good_requests(model):
    _, path = model
    with cd.LLM(path) as llm:
        sp = cd.SamplingParams(max_tokens=3, temperature=0)
        ref = llm.generate(["count: seven eight"], sp)[0]
        out = llm.generate(["count: seven eight", "\udcff", "week: 🙂", "count: seven eight"], sp, errors="return")
        assert out[0].token_ids == ref.token_ids == out[3].token_ids and out[0].text == "nine ten eleven"
        assert f"request {out[1].request_id!r}: lone surrogate U+DCFF" in str(out[1].error)
        assert f"request {out[2].request_id!r}: the tokenizer panicked" in str(out[2].error)
        llm.chat_template.limits = TemplateLimits(timeout_s=0.5, max_chars=10000)
        convs = [[{"role": "user", "content": c}] for c in ("count: seven eight", "div", "spin", "big", "日本")]
        c = llm.chat(convs, sp, errors="return")
        assert c[0].token_ids == ref.token_ids
        assert "ZeroDivisionError" in str(c[1].error) and "took longer than 0.5 s" in str(c[2].error)
        assert "more than 10000 characters" in str(c[3].error) and "panicked" in str(c[4].error)


def test_cli_generate_with_a_non_utf8_argument(model):
    _, path = model
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""), RUST_BACKTRACE="0")
    proc = subprocess.run([sys.executable, "-m", "colibri_dist", "generate", path.encode(), b"count: \xff"],
                          capture_output=True, timeout=120, env=env)
    assert proc.returncode == 2 and proc.stderr.decode().splitlines() == [
        "colibri: error: PROMPT: byte 0xFF at character 7 is not UTF-8 (pass UTF-8 text)"], proc.stderr
    proc = subprocess.run([sys.executable, "-m", "colibri_dist", "generate", path, "count: 日本"],
                          capture_output=True, timeout=120, env=env)
    assert proc.returncode == 2 and "PanicException" not in proc.stderr.decode()
    assert proc.stderr.decode().splitlines()[-1].startswith("colibri: error: request '0': the tokenizer panicked")
