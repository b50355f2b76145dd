"""`colibri generate` streams what the LLM generates; `colibri score` prints a JSON object."""
import json

import pytest

from colibri_dist.cli import main
from colibri_dist.generate import SamplingParams

from gen_fake_llm import FakeLLM


@pytest.fixture
def fake(monkeypatch):
    made = []

    def open_llm(args):
        made.append(FakeLLM())
        return made[-1]
    monkeypatch.setattr("colibri_dist.cli.generate.open_llm", open_llm)
    return made


def test_generate_streams_the_completion(fake, capsys):
    assert main(["generate", "m.colibri", "one two three", "--max-tokens", "7", "--temperature", "0.7",
                 "--seed", "5"]) == 0
    out, err = capsys.readouterr()
    want = FakeLLM().generate(["one two three"], SamplingParams(max_tokens=7, temperature=0.7, seed=5))[0]
    assert out == want.text + "\n" and want.text
    assert f"{len(want.token_ids)} generated (finish: {want.finish_reason})" in err and "first token" in err
    assert fake[0].closed


def test_generate_chat_and_stop(fake, capsys):
    assert main(["generate", "m.colibri", "copy: abc", "--chat", "--system", "be brief", "--max-tokens", "6"]) == 0
    out, _ = capsys.readouterr()
    conv = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "copy: abc"}]
    want = FakeLLM().chat([conv], SamplingParams(max_tokens=6))[0]
    assert out == want.text + "\n"
    stop = want.text.split()[1]                  # the fake's completion has several words
    assert main(["generate", "m.colibri", "copy: abc", "--chat", "--system", "be brief", "--max-tokens", "6",
                 "--stop", stop]) == 0
    out, err = capsys.readouterr()
    assert out == want.text[:want.text.find(stop)] + "\n" and "finish: stop" in err


def test_generate_bad_flag_values_exit_2(fake, capsys):
    assert main(["generate", "m.colibri", "x", "--top-p", "0"]) == 2
    assert "SamplingParams.top_p" in capsys.readouterr().err
    assert main(["generate", "m.colibri", "", "--max-tokens", "3"]) == 2     # empty prompt: the request's error
    assert "empty prompt" in capsys.readouterr().err


def test_score_prints_json(fake, tmp_path, capsys):
    f = tmp_path / "t.txt"
    f.write_text("one two three four")
    assert main(["score", "m.colibri", str(f), "--tokens"]) == 0
    res = json.loads(capsys.readouterr().out)
    want = FakeLLM().score(["one two three four"])[0]
    assert res["num_tokens"] == 4 and res["token_logprobs"] == want.token_logprobs
    assert res["total_logprob"] == want.total_logprob and res["perplexity"] > 1
    assert main(["score", "m.colibri", str(tmp_path / "nope.txt")]) == 2
    assert "cannot read UTF-8 text" in capsys.readouterr().err


def test_generate_prompt_from_stdin(fake, capsys, monkeypatch):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO("one two three"))
    assert main(["generate", "m.colibri", "-", "--max-tokens", "3"]) == 0
    want = FakeLLM().generate(["one two three"], SamplingParams(max_tokens=3))[0]
    assert capsys.readouterr().out == want.text + "\n"


def test_cli_defaults_are_the_api_defaults(fake, capsys):
    assert main(["generate", "m.colibri", "one two three"]) == 0        # no sampling flag at all
    out, err = capsys.readouterr()
    want = FakeLLM().generate(["one two three"])[0]                     # LLM.generate with nothing set
    assert out == want.text + "\n" and f"{len(want.token_ids)} generated" in err
    assert main(["generate", "m.colibri", "x", "--min-tokens", "3", "--max-tokens", "2"]) == 2
    assert "SamplingParams.min_tokens" in capsys.readouterr().err
    assert main(["generate", "m.colibri", "x", "--repetition-penalty", "0"]) == 2
    assert "SamplingParams.repetition_penalty" in capsys.readouterr().err
