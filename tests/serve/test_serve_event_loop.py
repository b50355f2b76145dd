"""Tokenizing runs off the event loop (issue 31, defect 4): one request with a 4 MB prompt used to freeze
every stream and /health for seconds; and a /v1/completions request takes at most --max-prompts prompts."""
import threading

import httpx
import pytest

from colibri_dist.serve import ServeConfig, Server


@pytest.fixture(scope="module")
def server(demo_model):
    with Server(ServeConfig(model=demo_model, port=0, max_prompts=8)) as s:
        yield s


def test_health_answers_while_a_prompt_is_being_tokenized(server, monkeypatch):
    """The tokenizer is held on one request until /health has answered: on the event loop (before) /health
    could not answer until the hold timed out."""
    info, release = server.state.info, threading.Event()
    encode = info.encode
    held = {}

    def slow_encode(prompt, *a, **k):
        if prompt == "count: held":
            held["released_by_health"] = release.wait(20)
        return encode(prompt, *a, **k)
    monkeypatch.setattr(info, "encode", slow_encode)
    done = {}
    t = threading.Thread(target=lambda: done.setdefault("r", httpx.post(
        server.url + "/v1/completions", json={"prompt": "count: held", "max_tokens": 1}, timeout=60)))
    t.start()
    with httpx.Client(base_url=server.url, timeout=60) as c:
        while not held and t.is_alive():              # until the held tokenizer call returns
            if c.get("/health").status_code == 200:
                release.set()
    t.join()
    assert held["released_by_health"] is True and done["r"].status_code == 200


def test_more_prompts_than_the_bound_is_a_400_naming_prompt(server):
    r = httpx.post(server.url + "/v1/completions", json={"prompt": ["count: one"] * 9, "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt" and "--max-prompts" in r.text
    ok = httpx.post(server.url + "/v1/completions", json={"prompt": ["count: one"] * 8, "max_tokens": 1})
    assert ok.status_code == 200 and len(ok.json()["choices"]) == 8
