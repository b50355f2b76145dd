"""The server's guard: body size limits and the API key, as one ASGI middleware in front of the app.

Role in the data flow: every HTTP request passes here first. Its body is read (at most the limit: 413
beyond it, by Content-Length or by counting; all of it within body_timeout seconds of the headers: 408
otherwise, so a half-sent body does not hold a connection and its task forever) and replayed to the app;
when the server has a key every route but /health and /metrics (open, as in vLLM) needs `Authorization:
Bearer KEY` (401 otherwise, compared in constant time), judged on the path the router matches (root_path
removed); /admin/* is refused (403) on a server started without a key. No route reads or writes a file
named by a request.
"""
import asyncio
import hmac
import json

from .errors import error_body

OPEN = ("/health", "/metrics")          # the only routes a keyed server answers without the key (vLLM's)


def route_path(scope):
    """The path the router matches: the request path less the app's root_path (uvicorn --root-path, a Ray Serve
    route_prefix), as Starlette strips it. Auth looks at this one, so a prefix cannot slip past it."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):] or "/"
    return path


LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


class Guard:
    def __init__(self, app, api_key, max_body, max_admin_body, origin_guard=None, body_timeout=30.0):
        """origin_guard: an OriginGuard for a loopback bind (DNS rebinding), or None; body_timeout: seconds."""
        self.app, self.api_key, self.origin_guard = app, api_key, origin_guard
        self.max_body, self.max_admin_body, self.body_timeout = max_body, max_admin_body, body_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = route_path(scope)
        denied = self.origin_guard.check(scope) if self.origin_guard is not None else None
        denied = denied or self._auth(path, _header(scope, b"authorization"))
        if denied is not None:
            return await _reply(send, *denied)
        limit = self.max_admin_body if path.startswith("/admin/") else self.max_body
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return await _reply(send, 413, f"the request body is larger than the server's limit of {limit} bytes",
                                "payload_too_large")
        try:
            body = await asyncio.wait_for(_read_body(receive, limit), self.body_timeout)
        except asyncio.TimeoutError:
            return await _reply(send, 408, f"the request body did not all arrive within {self.body_timeout:g} s "
                                f"(the server's --body-timeout)", "request_timeout")
        if body is None:                 # the client went away
            return
        if len(body) > limit:
            return await _reply(send, 413, f"the request body is larger than the server's limit of {limit} bytes",
                                "payload_too_large")
        return await self.app(scope, _replay(bytes(body), receive), send)

    def _auth(self, path, header):
        if self.api_key is None:
            if path.startswith("/admin/") or path == "/admin":
                return 403, "admin endpoints are disabled: start the server with --api-key", "admin_disabled"
            return None
        if path in OPEN:                 # everything else needs the key: deny by default
            return None
        token = header[7:].strip() if header and header[:7].lower() == "bearer " else None
        if token is None:
            return 401, "missing API key: send 'Authorization: Bearer KEY'", "invalid_api_key"
        if not hmac.compare_digest(token.encode("utf-8", "surrogatepass"), self.api_key.encode("utf-8")):
            return 401, "incorrect API key", "invalid_api_key"
        return None


class OriginGuard:
    """A loopback server answers only requests addressed to a loopback name and not sent by another site's
    page (DNS rebinding: a page of evil.example that resolves its name to 127.0.0.1, or a cross-site form
    POST): the Host must be a loopback name or one of allowed_hosts, an Origin (when sent) a loopback one or
    one of allowed_origins ("*" allows any). Ollama guards its loopback server the same way."""

    def __init__(self, allowed_hosts=(), allowed_origins=()):
        self.hosts = {h.lower() for h in allowed_hosts}
        self.origins = {o.lower().rstrip("/") for o in allowed_origins}

    def check(self, scope):
        host = _header(scope, b"host")
        if host is None or not self._loopback_or(_hostname(host), self.hosts):
            return 403, (f"Host {host!r} is not a loopback name: refused (DNS rebinding guard); start the server "
                         f"with --allowed-hosts to add names"), "host_not_allowed"
        origin = _header(scope, b"origin")
        if origin is None or "*" in self.origins or origin.lower().rstrip("/") in self.origins:
            return None
        if origin.lower() == "null" or not self._loopback_or(_hostname(origin.split("://", 1)[-1]), set()):
            return 403, (f"Origin {origin!r} is not a loopback page: refused (cross-site request); start the "
                         f"server with --allowed-origins to add it"), "origin_not_allowed"
        return None

    @staticmethod
    def _loopback_or(name, extra):
        return name in LOOPBACK_HOSTS or name.startswith("127.") and name.replace(".", "").isdigit() or name in extra


def _hostname(authority):
    """'[::1]:8000' -> '::1', 'LocalHost:80' -> 'localhost', 'example.com' -> 'example.com'."""
    a = authority.strip().lower().split("/", 1)[0]
    if a.startswith("["):
        return a[1:].split("]", 1)[0]
    return a.rsplit(":", 1)[0] if a.count(":") == 1 else a


def _header(scope, name):
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return v.decode("latin-1")
    return None


async def _read_body(receive, limit):
    """The body's bytes (stopping once past limit), or None when the client disconnects."""
    body, more = bytearray(), True
    while more and len(body) <= limit:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return None
        body += msg.get("body", b"")
        more = msg.get("more_body", False)
    return body


def _replay(body, receive):
    sent = False

    async def again():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()           # after the body: the disconnect a streaming route waits for
    return again


async def _reply(send, status, message, code):
    payload = json.dumps(error_body(status, message, None, code)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status == 408:                    # the rest of the body may still come: this connection is done
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
