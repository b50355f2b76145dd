"""The truth a stress run is checked against: an in-process, all-resident MoeExecutor.

Role in the data flow: the harness gives every batch the pool answered to
`Reference.forward(layer, x)` and compares bit for bit (np.array_equal, via
accounting.py). The reference opens its own hard link (or copy) of the model
container, so its hot-added experts go to its own `<model>.experts/` and the
pool's segment directory — which the faults tamper with — is never shared.
It applies the same hot-adds and removes as the pool, at the same points
(the harness holds its table lock across both).
"""
import os
import shutil
import threading

import numpy as np


def link_model(src, dst_dir, name="model.colibri"):
    """Hard-link (or copy across filesystems) a .colibri container into dst_dir; returns the new path.

    Hot-add segments live beside the container (`<path>.experts/`), so each link
    gets its own expert table while the big container bytes are shared.
    """
    os.makedirs(dst_dir, exist_ok=True)
    dst = os.path.join(dst_dir, name)
    if os.path.exists(dst):
        os.unlink(dst)
    shutil.rmtree(dst + ".experts", ignore_errors=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return dst


def expert_bytes(model):
    return sum(model.expert_layout(l).nbytes * model.config.n_experts for l in model.moe_layers)


def stage_models(src, out):
    """The two links a stress run needs (<out>/pool/ for the pool, <out>/ref/ for the reference) ->
    (pool path, reference path, the pool copy's ExpertTable, the experts' bytes)."""
    from ..format.reader import open_model
    os.makedirs(out, exist_ok=True)
    pool_path = link_model(src, os.path.join(out, "pool"))
    ref_path = link_model(src, os.path.join(out, "ref"))
    with open_model(pool_path) as model:
        return pool_path, ref_path, ExpertTable(model), expert_bytes(model)


def worker_budget(pool, cache_fraction, experts_bytes):
    """Each worker's RAM cache: pool.cache_bytes, else cache_fraction of all expert bytes over the workers."""
    total = pool.cache_bytes * pool.workers if pool.cache_bytes is not None else int(cache_fraction * experts_bytes)
    return max(1, total // pool.workers)


class Reference:
    def __init__(self, path, threads=1):
        from ..moe_executor import MoeExecutor
        self.path = path
        self.executor = MoeExecutor(path, threads=threads, cache_bytes=None, offload_dir=None)
        self._lock = threading.Lock()

    def forward(self, layer, x):
        with self._lock:
            return self.executor.moe_forward(layer, x)

    def add_expert(self, layer, weights, router_row, bias=0.0):
        with self._lock:
            return int(self.executor.add_expert(layer, weights, router_row, bias=bias))

    def remove_expert(self, layer, e):
        with self._lock:
            self.executor.remove_expert(layer, e)

    def close(self):
        self.executor.close()


class ExpertTable:
    """The live expert set and router rows per layer, as both the pool and the reference see it.

    Job streams read it (to aim tokens at live experts); the harness changes it
    only while holding the table write lock, right after pool and reference both
    applied the same add or remove.
    """

    def __init__(self, model):
        self.hidden = int(model.config.hidden)
        self.inter = int(model.config.inter)
        self.top_k = int(model.config.top_k)
        self.layers = list(model.moe_layers)
        self.routers = {l: np.array(model.router(l), dtype=np.float32) for l in self.layers}
        self.live = {l: list(range(self.routers[l].shape[0])) for l in self.layers}
        self.added = {l: [] for l in self.layers}
        self.removed = {l: [] for l in self.layers}
        self.version = 0
        self._lock = threading.Lock()

    def snapshot(self):
        with self._lock:
            return {l: (np.array(self.live[l]), self.routers[l]) for l in self.layers}

    def record_add(self, layer, new_id, router_row):
        with self._lock:
            if new_id != self.routers[layer].shape[0]:
                raise AssertionError(f"layer {layer}: hot-added id {new_id}, expected {self.routers[layer].shape[0]}")
            self.routers[layer] = np.vstack([self.routers[layer], np.asarray(router_row, np.float32)[None]])
            self.live[layer].append(new_id)
            self.added[layer].append(new_id)
            self.version += 1

    def record_remove(self, layer, e):
        with self._lock:
            self.live[layer].remove(e)
            self.removed[layer].append(e)
            self.version += 1

    def committed(self):
        """{layer: (added ids, removed ids sorted)} for layers with any change: what a reopen must show."""
        with self._lock:
            return {l: (list(self.added[l]), sorted(self.removed[l])) for l in self.layers
                    if self.added[l] or self.removed[l]}

    def summary(self):
        with self._lock:
            return {"version": self.version,
                    "layers": {l: {"live": len(self.live[l]), "added": list(self.added[l]),
                                   "removed": list(self.removed[l])} for l in self.layers}}


def stress_pool_args(cfg, model, budget, offload_dir, worker_resources, max_restarts):
    """The EngineArgs of the pool under stress: the config's `pool:` and `routing:` (EngineArgs.of_service,
    the one mapping) with the stress run's budget, spill dir, worker placement and restart allowance."""
    from ..config.engine_args import of_service
    args = of_service(cfg, model=model, cache_bytes=budget, offload_dir=offload_dir)
    return args.replace(pool_options=dict(args.pool_options, worker_resources=worker_resources,
                                          max_restarts=max_restarts))


def new_expert_weights(rng, hidden, inter, router_scale):
    """Random float32 weights and a router row for a hot-added expert (scale like a small trained FFN)."""
    weights = {"gate": (rng.standard_normal((inter, hidden)) / np.sqrt(hidden)).astype(np.float32),
               "up": (rng.standard_normal((inter, hidden)) / np.sqrt(hidden)).astype(np.float32),
               "down": (rng.standard_normal((hidden, inter)) / np.sqrt(inter)).astype(np.float32)}
    row = rng.standard_normal(hidden)
    row = (row / np.linalg.norm(row) * router_scale).astype(np.float32)
    return weights, row
