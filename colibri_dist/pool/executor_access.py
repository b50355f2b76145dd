"""The few MoeExecutor facts the Router needs, in one place (layers, experts, router, shared expert).

Role: the Router holds a private MoeExecutor (no expert ever runs on it) to route with
native Runtime.route on exactly the router matrix / bias / gating the MoeExecutor
uses, hot-added experts included, and to know each layer's shape.
"""


def moe_layers(engine):
    return list(engine.model.moe_layers)


def hidden(engine):
    return int(engine.model.config.hidden)


def top_k(engine):
    return int(engine.model.config.top_k)


def router_of(engine, layer):
    """(router float32[n_visible, h], bias | None, native.Gating, ids int32[n_visible]) as the MoeExecutor routes now.

    Kernel indices over this router are compact; ids maps them to expert ids."""
    t = engine.table(layer)
    return t.router, t.bias, t.gating, t.ids


def table_version(engine):
    """Version of the persisted hot-add manifest the engine routes with."""
    return int(engine.segments.version)


def has_shared(engine, layer):
    return engine.model.shared_expert(layer) is not None
