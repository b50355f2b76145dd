"""Fuzz of the serve paths (issue 31, in CI): 400 seeded random requests, on loopback, mixing every route
(completions, chat with response_format / structured_outputs / tools / tool_choice / logprobs / n / stream,
/tokenize, /detokenize, /admin/experts, /metrics, unknown paths), good and bad keys, foreign Host and
Origin headers, mutated field types and values. Every answer is a known status with OpenAI's error shape
(never a 500, never a hang), the server is alive after it, no KV block is left held, and a reference
request gives the same tokens before and after."""
import json
import re
import time

import numpy as np
import pytest

from colibri_dist.testing import random_llm

from serve_helpers import start_server

httpx = pytest.importorskip("httpx")
pytest.importorskip("llguidance")

KEY = "fuzz-key"
OK = {200, 400, 401, 403, 404, 405, 408, 413, 422, 429, 499}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["a"], "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "f", "parameters": SCHEMA}}
JUNK = [None, True, -1, 0, 1, 2 ** 63, 1e308, float("nan"), "", "x" * 300, [], [1, "a"], {}, {"type": "nope"},
        [[1, 2]], {"json": "{"}, "\udcff", "<tool_call>", -0.0]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = random_llm.build(tmp_path_factory.mktemp("serve-fuzz") / "m.colibri")
    s = start_server(path, served_model_name=("rand",), api_key=KEY, tool_call_parser="hermes",
                     disable_any_whitespace=True, max_num_seqs=8)
    yield s
    s.stop()


def _base(rng):
    kind = rng.integers(3)
    if kind == 0:
        body = {"prompt": "fuzz " + str(rng.integers(100)), "max_tokens": int(rng.integers(1, 12))}
        return "/v1/completions", body
    body = {"messages": [{"role": "user", "content": "fuzz " + str(rng.integers(100))}],
            "max_tokens": int(rng.integers(1, 16))}
    extra = [{"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}},
             {"response_format": {"type": "json_object"}}, {"structured_outputs": {"regex": "[a-c]{2,4}"}},
             {"structured_outputs": {"choice": ["x", "y"]}}, {"tools": [TOOL], "tool_choice": "required"},
             {"tools": [TOOL], "tool_choice": "auto"}, {"tools": [TOOL], "tool_choice": {"type": "function",
                                                                                           "function": {"name": "f"}}},
             {"logprobs": True, "top_logprobs": 2}, {"n": 2, "temperature": 1.0, "seed": 1}, {"stop": ["a"]}, {}]
    body.update(extra[int(rng.integers(len(extra)))])
    return "/v1/chat/completions", body


def _mutate(rng, body):
    for _ in range(int(rng.integers(0, 3))):
        keys = list(body) + ["stop_token_ids", "min_tokens", "top_k", "repetition_penalty", "tool_choice",
                             "response_format", "structured_outputs", "parallel_tool_calls", "zzz"]
        key = keys[int(rng.integers(len(keys)))]
        body[key] = JUNK[int(rng.integers(len(JUNK)))]
    return body


def _request(rng):
    r = rng.random()
    if r < 0.08:
        return "POST", "/tokenize", {"prompt": "a b"} if rng.random() < 0.5 else {"messages": "nope"}
    if r < 0.12:
        return "POST", "/detokenize", {"tokens": [int(t) for t in rng.integers(-5, 500, 4)]}
    if r < 0.15:
        return "POST", "/admin/experts", {"layer": 0}
    if r < 0.18:
        return "GET", ["/metrics", "/v1/models", "/nope", "/v1/../admin/experts"][int(rng.integers(4))], None
    path, body = _base(rng)
    if rng.random() < 0.5:
        body = _mutate(rng, body)
    if rng.random() < 0.2:
        body["stream"] = True
    return "POST", path, body


def _headers(rng):
    h = {"authorization": f"Bearer {KEY}"}
    r = rng.random()
    if r < 0.08:
        h["authorization"] = "Bearer wrong"
    elif r < 0.12:
        del h["authorization"]
    elif r < 0.16:
        h["host"] = "evil.example"
    elif r < 0.2:
        h["origin"] = "http://evil.example"
    return h


def _kv_used(client):
    text = client.get("/metrics", headers={"authorization": f"Bearer {KEY}"}).text
    return float(re.search(r"^colibri_kv_cache_blocks_used (\S+)$", text, re.M).group(1))


def test_four_hundred_random_requests(server):
    rng = np.random.default_rng(31)
    ref = {"messages": [{"role": "user", "content": "reference"}], "max_tokens": 8, "temperature": 1.0, "seed": 5}
    seen = {}
    with httpx.Client(base_url=server.url, timeout=120) as client:
        auth = {"authorization": f"Bearer {KEY}"}
        before = client.post("/v1/chat/completions", json=ref, headers=auth).json()["choices"][0]["message"]
        for i in range(400):
            method, path, body = _request(rng)
            data = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass") if body is not None else None
            r = client.request(method, path, content=data, headers={"content-type": "application/json",
                                                                  **_headers(rng)})
            seen[r.status_code] = seen.get(r.status_code, 0) + 1
            assert r.status_code in OK, (i, path, body, r.status_code, r.text[:300])
            if r.status_code >= 400 and r.headers.get("content-type", "").startswith("application/json"):
                err = r.json()["error"]
                assert set(err) >= {"message", "type", "param", "code"} and "Traceback" not in err["message"]
        assert client.get("/health").status_code == 200
        deadline = time.monotonic() + 60
        while _kv_used(client) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _kv_used(client) == 0
        after = client.post("/v1/chat/completions", json=ref, headers=auth).json()["choices"][0]["message"]
    assert after == before
    assert seen.get(200, 0) > 50 and seen.get(400, 0) > 50, seen            # both sides were exercised
