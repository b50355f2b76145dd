"""Issue 31's smaller server items, on one loopback server: /v1/models' root is the served name, a null
max_tokens fills the context (vLLM's), colibri_requests_running counts requests (n > 1 once)."""
import httpx
import pytest

from serve_helpers import start_server


@pytest.fixture(scope="module")
def server(demo_model):
    s = start_server(demo_model)
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