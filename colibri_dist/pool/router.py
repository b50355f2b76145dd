"""Router: the control plane of one pool (worker actors, hot-add, stats), and optionally its data path.

Role: the Router actor holds the ExpertWorker actors (Ray restarts a dead one up to
max_restarts). The workers are spawned by the Pool driver (spawn_workers), not by the Router, so they
do not share its fate: a Router that dies (Ray restarts it up to max_restarts, re-running __init__ with
the same worker handles and re-reading hot-added experts from the manifest) costs the control plane a
restart, never the workers or the data path; the Router persists hot-added experts through its private MoeExecutor (versioned manifest beside the
model) and tells the workers to refresh, and hands the worker handles to every caller that routes
for itself (ExpertClient: the Pool driver, each sequence runner). With routing_at="router" (the
design before sequence runners, kept for comparison) callers send it whole layer batches and its
own ExpertClient routes, dispatches and combines them, one call at a time, so an add from another
process waits for the batch in flight. Same bits either way (docs/ARCHITECTURE.md).
"""
import os
import uuid

import ray

from . import executor_access as ea
from .client import DEAD, ExpertClient
from .stats import pool_stats
from .worker import ExpertWorker

WorkerActor = ray.remote(ExpertWorker)


def spawn_workers(path, cfg):
    """(actor names, handles) of the pool's ExpertWorker actors, owned by the caller (the Pool driver;
    detached for a named pool) so that a Router death leaves them running. An unnamed pool's workers
    get a private name too: the Router (re)finds them by name, with plain strings as its arguments."""
    prefix = cfg.name or f"anon-{uuid.uuid4().hex[:12]}"
    names = [f"{prefix}:worker:{i}" for i in range(cfg.workers)]
    return names, [_spawn(str(path), cfg, i, n) for i, n in enumerate(names)]


def _spawn(path, c, i, name):
    options = dict(num_cpus=0, max_restarts=c.max_restarts, max_task_retries=0,
                   resources=c.worker_resources_of(i) or None, name=name, namespace=c.namespace)
    if c.name:
        options.update(lifetime="detached")
    return WorkerActor.options(**options).remote(path, i, c)


class Router:
    def __init__(self, path, cfg, worker_names=None):
        from ..moe_executor import MoeExecutor
        self.path, self.cfg = str(path), cfg
        self.executor = MoeExecutor(path, threads=1)       # hot-added experts: re-read from the manifest
        self.workers = [ray.get_actor(n, namespace=cfg.namespace) for n in worker_names] \
            if worker_names is not None else spawn_workers(path, cfg)[1]
        info = ray.get([w.ping.remote() for w in self.workers])
        self.client = ExpertClient(self.executor, self.workers, cfg, info)
        self.started = os.getpid()

    def handles(self):
        """What a caller needs to route for itself: worker handles, their ping info, the config."""
        return {"workers": list(self.workers), "info": list(self.client.info), "config": self.cfg,
                "path": self.path}

    # ------------------------------------------------------------------ data path (routing_at="router")
    def moe_forward(self, layer, x):
        """x: the array, or [ObjectRef] of it (then workers read that same object: no copy)."""
        ref = None
        if isinstance(x, list) and len(x) == 1 and isinstance(x[0], ray.ObjectRef):
            ref = x[0]
            x = ray.get(ref)
        return self.client.moe_forward(layer, x, ref)

    def route(self, layer, x):
        return self.client.route(layer, x)

    # ------------------------------------------------------------------ table
    def add_expert(self, layer, weights, router_row, bias=0.0):
        """Persist a new expert (Router engine), let every live worker see it; returns its id."""
        new_id = int(self.executor.add_expert(layer, weights, router_row, bias=bias))
        self._refresh_workers()
        self.client.placement.add_expert(layer, new_id)
        self.client._manifest = self.client._manifest_stamp()
        return new_id

    def remove_expert(self, layer, e):
        self.executor.remove_expert(layer, e)
        self._refresh_workers()
        self.client.placement.remove_expert(layer, int(e))
        self.client._manifest = self.client._manifest_stamp()
        return True

    def _refresh_workers(self):
        """Workers re-read the manifest now (a worker that is down reads it when it restarts)."""
        self.client.refresh_down()
        refs = {i: self.workers[i].refresh.remote() for i in self.client.balancer.live()}
        for i, ref in refs.items():
            try:
                ray.get(ref)
            except DEAD:
                self.client.mark_down(i)

    def list_experts(self):
        return self.client.experts()

    def rebalance(self, replicas=None):
        """Recompute homes and replicas from recent loads; the next batch uses the new placement."""
        return self.client.rebalance(replicas)

    # ------------------------------------------------------------------ status
    def ready(self):
        return {"workers": self.cfg.workers, "pids": [i["pid"] for i in self.client.info],
                "router_pid": os.getpid(), "path": self.path, "w8a8": self.cfg.w8a8,
                "router_node": ray.get_runtime_context().get_node_id()}

    def stats(self, counters=None, routing_at="router"):
        """counters: the callers' ExpertClient.counters() (routing in the callers); None = this Router's."""
        self.executor.refresh()
        entries = self.client.worker_stats()
        return pool_stats(entries, counters if counters is not None else [self.client.counters()],
                          ea.table_version(self.executor), self.cfg.routing_policy, self.client.experts(),
                          routing_at, self.cfg)

    def table_version(self):
        """The expert set's version this Router routes with (Pool.kv_identity when the Router routes)."""
        self.executor.refresh()
        return ea.table_version(self.executor)

    def count_heat(self):
        self.client.heat.on = True

    def heat(self):
        """Tokens this Router routed to each expert (routing_at="router"): {"layer": [count per expert]}."""
        return self.client.heat.report()

    def worker_pids(self):
        return [ray.get(w.ping.remote())["pid"] for w in self.workers]

    def shutdown(self):
        for w in self.workers:
            try:
                ray.kill(w, no_restart=True)
            except Exception:
                pass
        self.executor.close()
        return True


RouterActor = ray.remote(Router)
