"""The few Engine facts the Router needs, in one place (layers, experts, router, shared expert).

Role: the Router holds a private Engine (no expert ever runs on it) to route with
native Runtime.route on exactly the router matrix / bias / gating the Engine
uses, hot-added experts included, and to know each layer's shape.
"""


def moe_layers(engine):
    return list(engine.model.moe_layers)


def hidden(engine):
    return int(engine.model.config.hidden)


def top_k(engine):
    return int(engine.model.config.top_k)


def n_experts(engine, layer):
    """Current expert count of a layer, hot-added experts included."""
    router, _, _ = router_of(engine, layer)
    return int(router.shape[0])


def router_of(engine, layer):
    """(router float32[E, h], bias float32[E] | None, native.Gating) as the Engine routes now."""
    return engine.router(layer)


def has_shared(engine, layer):
    return engine.model.shared_expert(layer) is not None
