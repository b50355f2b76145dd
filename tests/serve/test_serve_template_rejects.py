"""Messages the chat template rejects (its raise_exception, as Qwen's and Llama's templates do for roles
they do not take) are a 400 naming messages on every route that renders them: /v1/chat/completions and
/tokenize (issue 31, defect 12: /tokenize answered 500 with two tracebacks), naming the model by its served
name, never by the server's path to it (issue 31 B8)."""
import httpx
import pytest

import colibri_dist as cd
from colibri_dist.serve import ServeConfig, Server

TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('system messages are not "
            "supported') }}{% endif %}{{ m['content'] }} {% endfor %}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from colibri_dist.demos import llm as demo_llm
    root = tmp_path_factory.mktemp("template-rejects")
    hf = demo_llm.write_checkpoint(str(root / "hf"), layers=1, n_experts=4, chat_template=TEMPLATE)
    cd.convert(hf, str(root / "m.colibri"), progress=False)
    with Server(ServeConfig(model=str(root / "m.colibri"), port=0, engine_process=False)) as s:
        yield s


@pytest.mark.parametrize("route", ["/tokenize", "/v1/chat/completions"])
def test_a_message_the_template_rejects_is_a_400_naming_messages(server, route, capfd):
    bad = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "count: one"}]
    extra = {"max_tokens": 2} if route.startswith("/v1") else {}
    with httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.post(route, json={"messages": bad, **extra})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "messages" and "system messages are not supported" in err["message"]
        assert "m.colibri" not in err["message"] and "/" not in err["message"], err   # no server path in a 400
        assert "(m: chat template: " in err["message"]                                 # the served name instead
        ok = c.post(route, json={"messages": bad[1:], **extra})
        assert ok.status_code == 200, ok.text
    assert "Traceback" not in capfd.readouterr().err
