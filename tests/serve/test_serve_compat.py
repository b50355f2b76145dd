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