"""Issue 31's smaller server items, on one loopback server: /v1/models' root is the served name, a null
max_tokens fills the context (vLLM's), colibri_requests_running counts requests (n > 1 once), logprobs
are capped by the engine's max_logprobs (--max-logprobs), and a
half-sent body gets a 408 after --body-timeout instead of holding its connection forever."""
import socket
from urllib.parse import urlparse

import httpx
import pytest

from colibri_dist.serve.backend import EngineBackend, RequestStream
from colibri_dist.serve.metrics import Metrics

from serve_helpers import start_server

BODY_TIMEOUT_S = 0.5
MAX_LOGPROBS = 5


@pytest.fixture(scope="module")
def server(demo_model):
    s = start_server(demo_model, body_timeout_s=BODY_TIMEOUT_S, llm_kwargs={"max_logprobs": MAX_LOGPROBS})
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def test_models_root_is_the_served_name_not_a_path(http, demo_model):
    (entry,) = http.get("/v1/models").json()["data"]
    assert entry["id"] == entry["root"] == "m" and demo_model not in str(entry)


def test_null_max_tokens_fills_the_context(http):
    ctx = http.get("/v1/models").json()["data"][0]["max_model_len"]
    r = http.post("/v1/completions", json={"prompt": "count: one", "max_tokens": None, "ignore_eos": True,
                                           "temperature": 0})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["completion_tokens"] == ctx - usage["prompt_tokens"]
    r = http.post("/v1/completions", json={"prompt": "count: one", "temperature": 0, "ignore_eos": True})
    assert r.json()["usage"]["completion_tokens"] == 16                    # absent: OpenAI's 16
    r = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "count: one"}],
                                                "max_tokens": None, "ignore_eos": True, "temperature": 0})
    usage = r.json()["usage"]
    assert usage["completion_tokens"] == ctx - usage["prompt_tokens"]      # chat: null is absent, the same


@pytest.mark.parametrize("route, field, extra", [
    ("/v1/completions", "logprobs", {"prompt": "count: one"}),
    ("/v1/chat/completions", "top_logprobs", {"messages": [{"role": "user", "content": "count: one"}],
                                              "logprobs": True}),
])
def test_logprobs_are_capped_by_the_engines_max_logprobs(http, route, field, extra):
    body = dict(extra, max_tokens=2, temperature=0)
    r = http.post(route, json={**body, field: MAX_LOGPROBS + 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    assert f"<= {MAX_LOGPROBS}" in r.json()["error"]["message"] and "max_logprobs" in r.json()["error"]["message"]
    assert http.post(route, json={**body, field: MAX_LOGPROBS}).status_code == 200


def test_running_requests_count_a_request_of_n_samples_once():
    backend = EngineBackend(engine=None, metrics=Metrics(), max_num_seqs=4, max_waiting=8)
    for rid, n in (("a", 2), ("b", 2), ("c", 1)):          # as submit() makes them from params.n
        backend._active[rid] = stream = RequestStream(rid, 3, None)
        stream.n = n
    assert backend.load() == (2, 1)            # a and b fill the 4 sequences; c waits
    backend._active["a"].n = 4
    assert backend.load() == (1, 2)
    del backend._active["a"]
    assert backend.load() == (2, 0)


def test_a_half_sent_body_is_answered_408(server):
    url = urlparse(server.url)
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {url.hostname}:{url.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n").encode()
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:   # 30 s: the test's own bound
        sock.sendall(head + b'{"prompt":')
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


def test_body_timeout_must_be_a_positive_number():
    from colibri_dist.errors import InvalidArgument
    from colibri_dist.serve import ServeConfig
    for bad in (0, -1, float("inf"), "30"):
        with pytest.raises(InvalidArgument, match="--body-timeout") as info:
            ServeConfig(model="m.colibri", body_timeout_s=bad)
        assert info.value.parameter == "body_timeout_s"
