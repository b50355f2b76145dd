"""API key (401), open /health and /metrics, and experts changed at run time through the admin routes:
requests admitted before the change finish on the old experts, requests admitted after it use the new."""
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from safetensors.numpy import save

import colibri_dist as cd
from colibri_dist.generate import SamplingParams
from colibri_dist.serve import sse

from serve_helpers import start_server

openai = pytest.importorskip("openai")
KEY = "sk-test-key"
A = {"prompt": "count: one two", "max_tokens": 40, "ignore_eos": True, "temperature": 0}
B = {"prompt": "spell: c d", "max_tokens": 12, "ignore_eos": True, "temperature": 0}


@pytest.fixture(scope="module")
def model_copy(demo_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("serve-admin") / "m.colibri"
    shutil.copy(demo_model, path)              # hot-adds persist beside the container: not the shared one
    return str(path)


@pytest.fixture(scope="module")
def server(model_copy):
    s = start_server(model_copy, api_key=KEY, max_num_seqs=4)
    yield s
    s.stop()


def _auth(key=KEY):
    return {"Authorization": f"Bearer {key}"}


def test_missing_or_wrong_key_is_401_and_the_right_one_works(server):
    with httpx.Client(base_url=server.url) as c:
        for headers in ({}, _auth("wrong"), {"Authorization": KEY}):
            r = c.post("/v1/completions", json={"prompt": "count: one", "max_tokens": 1}, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", r.text
            assert "Traceback" not in r.text
        assert c.get("/v1/models").status_code == 401
        assert c.post("/tokenize", json={"prompt": "count: one"}).status_code == 401
        assert c.get("/health").status_code == 200 and c.get("/metrics").status_code == 200
    ok = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    assert ok.completions.create(model="m", prompt="count: seven eight", max_tokens=2, temperature=0
                                 ).choices[0].text == "nine ten"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0).models.list()


def test_admin_is_behind_the_key_and_refuses_bad_input(server):
    with httpx.Client(base_url=server.url) as c:
        assert c.get("/admin/experts").status_code == 401
        listed = c.get("/admin/experts", headers=_auth()).json()["experts"]
        assert listed == {"0": list(range(8)), "1": list(range(8))}
        r = c.post("/admin/experts?layer=0", content=b"not safetensors", headers=_auth())
        assert r.status_code == 400 and r.json()["error"]["param"] == "body"
        r = c.post("/admin/experts?layer=x", content=b"", headers=_auth())
        assert r.status_code == 400 and r.json()["error"]["param"] == "layer"
        r = c.post("/admin/experts?layer=7", content=_expert(server), headers=_auth())
        assert r.status_code == 400 and "layer" in r.json()["error"]["message"]


def test_admin_disabled_without_a_key(demo_model):
    s = start_server(demo_model)
    try:
        r = httpx.get(s.url + "/admin/experts")
        assert r.status_code == 403 and r.json()["error"]["code"] == "admin_disabled"
    finally:
        s.stop()


def _expert(server):
    llm = server.llm
    h, inter = llm.arch.hidden, llm.executor.model.expert_layout(0).inter
    rng = np.random.default_rng(0)
    return save({"gate": rng.standard_normal((inter, h)).astype(np.float32) * 3,
                 "up": rng.standard_normal((inter, h)).astype(np.float32) * 3,
                 "down": rng.standard_normal((h, inter)).astype(np.float32) * 3,
                 "router_row": np.full(h, 3.0, np.float32)})       # a router row every token prefers


def _text(url, body):
    with httpx.Client(base_url=url, timeout=120, headers=_auth()) as c:
        r = c.post("/v1/completions", json=dict(body, stream=True))
        assert r.status_code == 200, r.text
        return "".join(ch["choices"][0]["text"] for ch in sse.parse(r.content) if ch["choices"])


def _wait(cond, what):
    end = time.time() + 30
    while not cond():
        assert time.time() < end, what
        time.sleep(0.01)


def test_hot_add_applies_to_requests_admitted_after_it(server, model_copy, reference_llm):
    backend = server.state.backend
    old = {k: reference_llm.generate([b["prompt"]], SamplingParams(max_tokens=b["max_tokens"], ignore_eos=True,
                                                                   temperature=0.0))[0].text
           for k, b in (("A", A), ("B", B))}
    with ThreadPoolExecutor(3) as ex:
        with backend.lock:                            # freeze the engine while the three arrive in order
            fa = ex.submit(_text, server.url, A)
            _wait(lambda: sum(backend.load()) == 1, "A did not arrive")
            fadd = ex.submit(httpx.post, server.url + "/admin/experts?layer=0", content=_expert(server),
                             headers=_auth(), timeout=120)
            _wait(lambda: backend._control, "the admin change did not arrive")
            fb = ex.submit(_text, server.url, B)
            _wait(lambda: sum(backend.load()) == 2, "B did not arrive")
        text_a, added, text_b = fa.result(), fadd.result(), fb.result()
    assert added.status_code == 200, added.text
    new_id = added.json()["expert"]
    assert new_id == 8 and added.json()["applies_to"] == "requests admitted after this change"
    with cd.LLM(model_copy) as changed:                # the container with the persisted new expert
        new_b = changed.generate([B["prompt"]], SamplingParams(max_tokens=12, ignore_eos=True, temperature=0.0))[0]
    assert new_b.text != old["B"]                      # the expert changes this request's tokens ...
    assert text_a == old["A"]                          # ... A was in flight: it finished on the old experts
    assert text_b == new_b.text                        # ... B arrived during the change: the new experts
    with httpx.Client(base_url=server.url, headers=_auth()) as c:
        assert c.get("/admin/experts").json()["experts"]["0"] == list(range(9))
        assert c.delete(f"/admin/experts/0/{new_id}").status_code == 200
        assert c.get("/admin/experts").json()["experts"]["0"] == list(range(8))
    assert _text(server.url, B) == old["B"]            # removed: back to the original bits


def test_colibri_experts_cli_against_the_server(server, tmp_path, capsys):
    from colibri_dist.cli import main
    (tmp_path / "e.safetensors").write_bytes(_expert(server))
    common = ["--server", server.url, "--api-key", KEY]
    assert main(["experts", "add", "--layer", "1", "--weights", str(tmp_path / "e.safetensors")] + common) == 0
    assert "layer 1: added expert 8 (requests admitted after this change)" in capsys.readouterr().out
    assert main(["experts", "list"] + common) == 0
    assert "layer 1: 9 experts: 0 1 2 3 4 5 6 7 8" in capsys.readouterr().out
    assert main(["experts", "remove", "--layer", "1", "--expert", "8"] + common) == 0
    assert main(["experts", "list", "--server", server.url, "--api-key", "wrong"]) == 1
    assert "401 incorrect API key" in capsys.readouterr().err
