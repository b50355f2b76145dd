"""The API key holds under a root path (issue 31, defect 6): with uvicorn's root_path or a Ray Serve
route_prefix the router matches the path less the prefix, and the guard used to judge the full path, so
/prefix/v1/completions and /prefix/admin/experts answered without a key. Deny by default instead."""
import asyncio

import pytest

from colibri_dist.serve.security import Guard, route_path

KEY = "k-123"


def _call(path, root_path="", key=None, api_key=KEY):
    seen = []

    async def app(scope, receive, send):
        seen.append(route_path(scope))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sent = []

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(msg):
        sent.append(msg)
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    scope = {"type": "http", "path": path, "root_path": root_path, "headers": headers, "method": "POST"}
    asyncio.run(Guard(app, api_key, 1 << 20, 1 << 20)(scope, receive, send))
    return sent[0]["status"], seen


@pytest.mark.parametrize("root", ["", "/prefix", "/a/b"])
@pytest.mark.parametrize("route", ["/v1/completions", "/admin/experts", "/tokenize", "/v1/models", "/docs",
                                   "/nosuch"])
def test_every_route_but_health_and_metrics_needs_the_key_under_any_root_path(root, route):
    assert _call(root + route, root)[0] == 401
    status, seen = _call(root + route, root, key=KEY)
    assert status == 200 and seen == [route]


@pytest.mark.parametrize("root", ["", "/prefix"])
@pytest.mark.parametrize("route", ["/health", "/metrics"])
def test_health_and_metrics_stay_open(root, route):
    assert _call(root + route, root)[0] == 200


def test_without_a_key_admin_is_refused_under_a_root_path_too():
    assert _call("/prefix/admin/experts", "/prefix", api_key=None)[0] == 403
    assert _call("/prefix/v1/completions", "/prefix", api_key=None)[0] == 200


def _call_from(host, origin=None, guard=None):
    from colibri_dist.serve.security import OriginGuard
    sent = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(msg):
        sent.append(msg)
    headers = [(b"host", host.encode())] + ([(b"origin", origin.encode())] if origin else [])
    scope = {"type": "http", "path": "/v1/completions", "root_path": "", "headers": headers, "method": "POST"}
    asyncio.run(Guard(app, None, 1 << 20, 1 << 20, guard or OriginGuard())(scope, receive, send))
    return sent[0]["status"]


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "LOCALHOST", "[::1]:8000", "127.3.4.5"])
def test_a_keyless_loopback_server_answers_loopback_hosts_and_pages(host):
    """Issue 31, defect 7 (DNS rebinding): only loopback Host names and Origins, unless allowed."""
    assert _call_from(host) == 200
    assert _call_from(host, "http://127.0.0.1:3000") == 200 and _call_from(host, "http://localhost") == 200


@pytest.mark.parametrize("host, origin", [("evil.example:8000", None), ("127.0.0.1.evil.example", None),
                                          ("127.0.0.1:8000", "https://evil.example"), ("127.0.0.1:8000", "null")])
def test_a_foreign_host_or_a_cross_site_origin_is_refused(host, origin):
    assert _call_from(host, origin) == 403


def test_allowed_hosts_and_origins_open_what_they_name():
    from colibri_dist.serve.security import OriginGuard
    guard = OriginGuard(allowed_hosts=["box.lan"], allowed_origins=["https://app.example"])
    assert _call_from("box.lan:8000", guard=guard) == 200
    assert _call_from("127.0.0.1", "https://app.example/", guard=guard) == 200
    assert _call_from("127.0.0.1", "https://other.example", guard=guard) == 403
    assert _call_from("127.0.0.1", "https://other.example", guard=OriginGuard(allowed_origins=["*"])) == 200
