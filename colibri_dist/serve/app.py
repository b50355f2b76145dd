"""The FastAPI application: OpenAI-compatible routes over a ServerState, errors in OpenAI's shape.

Role in the data flow: build_app(state) -> an ASGI app (the Guard middleware of security.py in front)
that uvicorn serves (launch.py) or Ray Serve ingresses (ray_serve.py). Routes: POST /v1/completions,
POST /v1/chat/completions (generation.py), GET /v1/models, GET /health, GET /metrics, POST /tokenize,
POST /detokenize, and the expert admin routes (admin.py). A request body is parsed here with bounded
JSON (no NaN/Infinity, no huge integers, bounded nesting); anything unexpected becomes a 500 in
OpenAI's shape with no traceback in the response (the traceback goes to the server log).
"""
import asyncio
import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import generation
from .errors import APIError, error_body
from .metrics import model_gauges
from .config import is_loopback
from .security import Guard, OriginGuard

log = logging.getLogger("colibri.serve")
MAX_DEPTH = 32


def build_app(state):
    """The ASGI app of one ServerState (guarded by its key and body limits)."""
    app = FastAPI(title="colibri serve", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.colibri = state
    _errors(app)
    _routes(app, state)
    from . import admin
    admin.routes(app, state)
    cfg = state.cfg
    origins = OriginGuard(cfg.allowed_hosts, cfg.allowed_origins) if is_loopback(cfg.host) else None
    return Guard(app, cfg.api_key, cfg.max_body_bytes, cfg.max_admin_body_bytes, origins, cfg.body_timeout_s)


async def read_json(request):
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise APIError(400, f"the request body is not UTF-8 (byte {exc.start})", code="invalid_json") from None
    try:
        body = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise APIError(400, f"the request body is not valid JSON ({str(exc)[:120]})", code="invalid_json") from None
    if _depth(body) > MAX_DEPTH:
        raise APIError(400, f"the request body nests deeper than {MAX_DEPTH} levels", code="invalid_json")
    return body


def _no_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _depth(x, d=0):
    if d > MAX_DEPTH:
        return d
    if isinstance(x, dict):
        return max((_depth(v, d + 1) for v in x.values()), default=d + 1)
    if isinstance(x, list):
        return max((_depth(v, d + 1) for v in x), default=d + 1)
    return d


def _errors(app):
    @app.exception_handler(APIError)
    async def api_error(request, exc):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc):
        return JSONResponse(error_body(400, "invalid request"), status_code=400)

    @app.exception_handler(Exception)
    async def internal(request, exc):
        log.exception("internal error on %s", request.url.path)
        return JSONResponse(error_body(500, f"internal server error ({type(exc).__name__}); see the server log"),
                            status_code=500)


def _routes(app, state):
    @app.post("/v1/completions")
    async def completions(request: Request):
        return await generation.completions(state, request, await read_json(request))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await generation.chat(state, request, await read_json(request))

    @app.get("/v1/models")
    async def models():          # root: vLLM's base model; the served name here, never a server path
        return {"object": "list", "data": [
            {"id": n, "object": "model", "created": state.created, "owned_by": "colibri", "root": state.names[0],
             "max_model_len": state.info.max_seq_len} for n in state.names]}

    @app.get("/health")
    async def health():
        if not state.backend.alive:
            raise APIError(503, "the engine is not running", code="engine_stopped")
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics():
        stats, pool = await asyncio.to_thread(state.backend.model_stats)   # may wait for a step or the pool
        running, waiting = state.backend.load()
        text = state.metrics.render(model_gauges(stats, running, waiting, pool))
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @app.post("/tokenize")
    async def tokenize(request: Request):
        return _tokenize(state, await read_json(request))

    @app.post("/detokenize")
    async def detokenize(request: Request):
        return _detokenize(state, await read_json(request))


def _tokenize(state, body):
    """vLLM's /tokenize: {"prompt", "add_special_tokens"=true} or {"messages", "add_generation_prompt"=true,
    "tools"}."""
    from .params import _messages
    from .tools.request import check_tools
    if not isinstance(body, dict) or set(body) - {"model", "prompt", "messages", "add_special_tokens",
                                                   "add_generation_prompt", "tools"}:
        raise APIError(400, "expected {\"prompt\": str} or {\"messages\": [...]} (with optional model, "
                            "add_special_tokens, add_generation_prompt)", param="prompt")
    state.check_model(body.get("model"))
    if ("prompt" in body) == ("messages" in body):
        raise APIError(400, "send exactly one of prompt and messages", param="prompt")
    flags = {k: body.get(k, True) for k in ("add_special_tokens", "add_generation_prompt")}
    for k, v in flags.items():
        if not isinstance(v, bool):
            raise APIError(400, f"{k}: expected true or false", param=k)
    if "prompt" in body:
        if not isinstance(body["prompt"], str):
            raise APIError(400, "prompt: expected a string", param="prompt")
        ids = state.info.encode(body["prompt"], add_special_tokens=flags["add_special_tokens"])
    else:
        text = state.info.render_chat(_messages(body["messages"]), add_generation_prompt=flags["add_generation_prompt"],
                                      tools=check_tools(body.get("tools")))
        ids = state.info.encode(text, add_special_tokens=False, param="messages")
    return {"count": len(ids), "max_model_len": state.info.max_seq_len, "tokens": ids}


def _detokenize(state, body):
    from .params import _is_token
    if not isinstance(body, dict) or set(body) - {"model", "tokens"}:
        raise APIError(400, "expected {\"tokens\": [int, ...]}", param="tokens")
    state.check_model(body.get("model"))
    toks = body.get("tokens")
    if not isinstance(toks, list) or not all(_is_token(t) and t < state.info.vocab_size for t in toks):
        raise APIError(400, f"tokens: expected a list of token ids in [0, {state.info.vocab_size})", param="tokens")
    return {"prompt": state.info.decode(toks)}
