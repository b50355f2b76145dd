"""Experts at run time: the admin routes (behind the API key) that hot-add and remove experts.

Role in the data flow: POST /admin/experts?layer=L[&bias=B] with a safetensors body (tensors gate, up,
down and router_row, as `colibri experts add` reads them; the bytes come in the request, no file is
named), DELETE /admin/experts/{layer}/{expert}, GET /admin/experts. A change goes through
EngineBackend.exclusive: requests admitted before it finish on the experts they started with (the
change waits for them), requests arriving meanwhile wait and then run on the changed model. The change
lands in the model's expert store (in process) or the pool's (with --workers / --pool), which persist it
beside the container as `colibri experts add` does.
"""
import numpy as np
from fastapi import Request

from ..errors import ColibriError
from .errors import APIError

ROLES = {"gate": ("gate", "gate_proj", "w1"), "up": ("up", "up_proj", "w3"), "down": ("down", "down_proj", "w2")}


class ExpertAdmin:
    def __init__(self, llm, pool, backend):
        self.backend = backend
        self.target = pool if pool is not None else llm.executor      # a Pool, a RemoteEngine or the MoeExecutor
        self.changes = 0

    def list(self):
        return {int(k): list(v) for k, v in self.target.list_experts().items()}

    async def add(self, layer, weights, router_row, bias):
        new_id = await self.backend.exclusive(lambda: self.target.add_expert(layer, weights, router_row, bias))
        self.changes += 1
        return int(new_id)

    async def remove(self, layer, expert):
        await self.backend.exclusive(lambda: self.target.remove_expert(layer, expert))
        self.changes += 1


def parse_expert(raw):
    """safetensors bytes -> (weights {"gate","up","down"} float32, router_row float32[h]); 400 naming what is wrong."""
    from safetensors.numpy import load
    try:
        tensors = load(bytes(raw))
    except Exception as exc:
        raise APIError(400, f"body: not a safetensors file ({str(exc)[:100]})", param="body") from None
    weights = {}
    for role, names in ROLES.items():
        hit = [v for k, v in tensors.items() if k.removesuffix(".weight").rsplit(".", 1)[-1] in names]
        if len(hit) != 1:
            raise APIError(400, f"body: expected one {role} tensor (named one of {', '.join(names)}), "
                                f"found {len(hit)} among {sorted(tensors)[:8]}", param="body")
        weights[role] = np.ascontiguousarray(hit[0], dtype=np.float32)
    if "router_row" not in tensors:
        raise APIError(400, "body: no router_row tensor", param="body")
    return weights, np.ascontiguousarray(tensors["router_row"], dtype=np.float32).reshape(-1)


def _int(name, value):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise APIError(400, f"{name}: expected an integer, got {str(value)[:40]!r}", param=name) from None


def routes(app, state):
    admin = state.admin

    @app.get("/admin/experts")
    async def list_experts():
        return {"experts": {str(k): v for k, v in admin.list().items()}, "changes": admin.changes}

    @app.post("/admin/experts")
    async def add_expert(request: Request):
        q = request.query_params
        layer = _int("layer", q.get("layer"))
        try:
            bias = float(q.get("bias", 0.0))
        except ValueError:
            raise APIError(400, "bias: expected a number", param="bias") from None
        weights, row = parse_expert(await request.body())
        try:
            new_id = await admin.add(layer, weights, row, bias)
        except ColibriError as exc:
            raise APIError(400, state.info.public(exc), param="layer") from None
        return {"layer": layer, "expert": new_id, "applies_to": "requests admitted after this change"}

    @app.delete("/admin/experts/{layer}/{expert}")
    async def remove_expert(layer: str, expert: str):
        layer, expert = _int("layer", layer), _int("expert", expert)
        try:
            await admin.remove(layer, expert)
        except ColibriError as exc:
            raise APIError(400, state.info.public(exc), param="expert") from None
        return {"layer": layer, "removed": expert, "applies_to": "requests admitted after this change"}
