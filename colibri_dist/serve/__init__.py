"""colibri serve: an OpenAI-compatible HTTP server over the generation engine (FastAPI + uvicorn).

    from colibri_dist.serve import Server, ServeConfig, serve
    serve("model.colibri", port=8000)                     # blocks, like `colibri serve model.colibri`
    with Server(ServeConfig(model="model.colibri", port=0)) as s:
        print(s.url)                                      # http://127.0.0.1:<port>/v1/...
    app = colibri_dist.serve.deployment("model.colibri", min_replicas=1, max_replicas=2)  # Ray Serve

Rooms inside: config (flags + security rules), params (request field tables), state (model checks),
backend (the driver thread over the engine client: in process, the engine process or --runners M pool
sequence runners; per-request queues), generation/responses/logprobs/sse (the OpenAI
shapes), chat_output (a chat choice's reasoning_content / content / tool_calls: reasoning.py, then the
tools/ parsers), metrics (Prometheus text), security (key + body limits), admin (experts at run time),
app (routes), launch (open model, run uvicorn), ray_serve (the only module here that imports ray).
Needs the `[serve]` extra: pip install 'colibri-dist[serve]'.
"""
from .config import ServeConfig

__all__ = ["ServeConfig", "Server", "serve", "build_app", "deployment"]


def __getattr__(name):
    if name in ("Server", "serve"):
        from . import launch
        return getattr(launch, name)
    if name == "build_app":
        from .app import build_app
        return build_app
    if name == "deployment":
        from .ray_serve import deployment
        return deployment
    raise AttributeError(f"module 'colibri_dist.serve' has no attribute {name!r}")
