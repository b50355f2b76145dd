"""Router: exact routing, per-worker dispatch, failover and combine for one pool.

Role in the data flow (one call = one layer batch):
    route (private Engine -> native Runtime.route)  ->  group per expert
    -> balancer picks a replica per expert           ->  one request per worker per micro-batch
    -> all micro-batches in flight, replies gathered with ray.wait
    -> scatter into slot_out[t, j] / shared[t]       ->  native.combine  (same bits as the Engine)
A request whose worker dies is re-sent to another live worker (or to the
restarted actor); rows are credited to a worker only when its reply arrives,
so no token is lost or counted twice. Hot-added experts are persisted beside
the model by the Router's engine (versioned manifest) and the workers refresh;
the Router is a one-call-at-a-time actor, so a batch always finishes on the
table it started with.
"""
import os
import time

import numpy as np
import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

from ..errors import InvalidArgument, PoolError
from ..routing.balancer import make_balancer
from ..routing.placement import LoadMeter, plan
from ..routing.policy import BalancedRouting
from . import engine_access as ea
from .dispatch import build_batches, group_by_expert, scatter, shared_chunks, split_hot
from .worker import ExpertWorker

WorkerActor = ray.remote(ExpertWorker)
_INLINE_BYTES = 100 * 1024  # smaller batches travel inline in each request (a put costs ~ms)
_DEAD = (RayActorError, ActorUnavailableError)


class Router:
    def __init__(self, path, cfg):
        from ..engine import Engine
        from .. import native
        self.native = native
        self.path, self.cfg = str(path), cfg
        self.n = cfg.workers
        self.engine = Engine(path, threads=1)
        self.workers = [self._spawn(i) for i in range(self.n)]
        self.info = ray.get([w.ping.remote() for w in self.workers])
        self.balancer = make_balancer(cfg.balancer, self.n)
        self.layers = ea.moe_layers(self.engine)
        self.replicas = cfg.replicas
        self.placement = plan(self._experts(), self.n, replicas=self.replicas)
        self.meter = LoadMeter()
        bal = cfg.balancer_spec
        self.policy = (BalancedRouting(bal.get("window", 64), bal.get("threshold", 1.8))
                       if cfg.routing_policy == "balanced" else None)
        self.down = {}           # worker -> pending ping ref
        self.tokens = [0] * self.n
        self.last_rows = [0] * self.n  # rows per worker in the last layer batch
        self.busy = [0.0] * self.n     # seconds of expert compute reported by each worker
        self.timing = {"route_dispatch_s": 0.0, "collect_s": 0.0, "combine_s": 0.0}  # Router wall time
        self.retries = 0
        self.off_home = 0        # expert batches run on a replica other than the home
        self.batches = 0
        self.rebalances = 0
        self.shared_cache = {}

    # ------------------------------------------------------------------ workers
    def _spawn(self, i):
        c = self.cfg
        options = dict(num_cpus=0, max_restarts=c.max_restarts, max_task_retries=0,
                       resources=c.worker_resources_of(i) or None)
        if c.name:
            options.update(name=f"{c.name}:worker:{i}", lifetime="detached", namespace=c.namespace)
        return WorkerActor.options(**options).remote(self.path, i, c)

    def _mark_down(self, i):
        self.balancer.mark_dead(i)
        self.down.setdefault(i, self.workers[i].ping.remote())

    def _refresh_down(self):
        """Bring back workers whose ping answered (Ray restarted them; a restarted worker opens the
        model afresh, so it already sees every persisted hot-add). When every worker is down at
        once, wait for Ray to restart one (up to cfg.restart_timeout_s) instead of planning a
        batch with nobody to run it."""
        patience = self.cfg.restart_timeout_s
        deadline = time.monotonic() + patience
        self._poll_down(timeout=0)
        while self.down and len(self.down) >= self.n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolError(f"all {self.n} workers are down and none came back within {patience} s "
                                f"(Ray max_restarts {self.cfg.max_restarts} may be used up)")
            self._poll_down(timeout=min(left, 1.0))
            if len(self.down) >= self.n:
                time.sleep(0.1)  # a permanently dead actor answers at once: do not spin

    def _poll_down(self, timeout):
        if not self.down:
            return
        refs = {ref: i for i, ref in self.down.items()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        for ref in ready:
            i = refs[ref]
            try:
                info = ray.get(ref)
            except _DEAD:
                self.down[i] = self.workers[i].ping.remote()
                continue
            self.info[i] = info
            del self.down[i]
            self.balancer.mark_alive(i)

    def _experts(self):
        return {l: ea.expert_ids(self.engine, l) for l in self.layers}

    def _alternative(self, failed):
        live = [w for w in self.balancer.live() if w != failed]
        if not live:
            return failed  # nobody else: wait for Ray to restart this actor
        return min(live, key=lambda w: (self.balancer.assigned_rows[w], w))

    # ------------------------------------------------------------------ routing
    def _check_x(self, layer, x):
        if layer not in self.layers:
            raise InvalidArgument(f"layer {layer} is not an MoE layer of {self.path} (MoE layers: {self.layers})")
        x = np.asarray(x)
        h = ea.hidden(self.engine)
        if x.ndim != 2 or x.shape[1] != h:
            raise InvalidArgument(f"layer {layer}: x must have shape [n, {h}], got {list(x.shape)}")
        if x.dtype != np.float32:
            raise InvalidArgument(f"layer {layer}: x must be float32, got {x.dtype}")
        if not np.isfinite(x).all():  # the balanced policy does not go through the Engine's check
            raise InvalidArgument(f"layer {layer}: x contains NaN or Inf (non-finite input is rejected)")
        return np.ascontiguousarray(x)

    def _route(self, layer, x):
        if self.policy is None:
            return self.engine.route(layer, x)
        router, bias, gating, ids = ea.router_of(self.engine, layer)
        idx, w = self.policy.route(layer, x, router, gating, bias)
        return ids[idx].astype(np.int32), w

    def route(self, layer, x):
        return self._route(layer, self._check_x(layer, x))

    def _has_shared(self, layer):
        if layer not in self.shared_cache:
            self.shared_cache[layer] = ea.has_shared(self.engine, layer)
        return self.shared_cache[layer]

    # ------------------------------------------------------------------ forward
    def moe_forward(self, layer, x):
        """x: the array, or [ObjectRef] of it (then workers read that same object: no copy)."""
        x, x_arg = self._resolve(x)
        x = self._check_x(layer, x)
        if x_arg is None:
            x_arg = x if x.nbytes < _INLINE_BYTES else ray.put(x)
        self._refresh_down()
        n, k, h = len(x), ea.top_k(self.engine), x.shape[1]
        if n == 0:
            return np.zeros((0, h), np.float32)
        idx_all = np.zeros((n, k), np.int32)
        w_all = np.zeros((n, k), np.float32)
        slot_out = np.zeros((n, k, h), np.float32)
        shared = np.zeros((n, h), np.float32) if self._has_shared(layer) else None
        step = self.cfg.micro_batch
        pending = {}
        t0 = time.perf_counter()
        for a in range(0, n, step):
            b = min(n, a + step)
            idx, w = self._route(layer, x[a:b])
            idx_all[a:b], w_all[a:b] = idx, w
            for wk, batch, req in self._plan_micro(layer, a, idx, w, shared is not None):
                pending[self._send(wk, x_arg, req)] = (wk, batch, req, a, b, 0, x_arg)
        t1 = time.perf_counter()
        before = list(self.tokens)
        self._collect(pending, slot_out, shared)
        self.last_rows = [a - b for a, b in zip(self.tokens, before)]
        self.batches += 1
        t2 = time.perf_counter()
        y = self.native.combine(w_all, slot_out, shared)
        t3 = time.perf_counter()
        for key, dt in (("route_dispatch_s", t1 - t0), ("collect_s", t2 - t1), ("combine_s", t3 - t2)):
            self.timing[key] += dt
        return y

    @staticmethod
    def _resolve(x):
        if isinstance(x, list) and len(x) == 1 and isinstance(x[0], ray.ObjectRef):
            return ray.get(x[0]), x[0]
        return x, None

    def _plan_micro(self, layer, offset, idx, w, with_shared):
        groups = group_by_expert(idx)
        self.meter.add(layer, list(groups), [len(t) for t, _ in groups.values()])
        if self.balancer.kind == "token-bucket":
            groups = split_hot(groups, lambda e: len(self._replicas(layer, e)), len(self.balancer.live()))
        else:
            groups = {(e, 0): ts for e, ts in groups.items()}
        loads = {key: (float(w[t, s].sum()), len(t)) for key, (t, s) in groups.items()}
        assign = self.balancer.assign(loads, lambda key: self._replicas(layer, key[0]),
                                      expert_of=lambda key: (layer, key[0]))
        self.off_home += sum(1 for key, wk in assign.items() if wk != self._replicas(layer, key[0])[0])
        spans = shared_chunks(len(idx), self.balancer.live()) if with_shared else None
        version = ea.table_version(self.engine)
        for wk, batch in build_batches(groups, assign, spans).items():
            yield wk, batch, batch.request(layer, version, offset)

    def _replicas(self, layer, e):
        try:
            return self.placement.replicas_of((layer, e))
        except InvalidArgument:
            return (self.placement.add_expert(layer, e),)

    def _send(self, wk, x_arg, req):
        return self.workers[wk].run.remote(x_arg, req)

    def _collect(self, pending, slot_out, shared):
        limit = 2 * self.n + 4
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            wk, batch, req, a, b, tries, x_arg = pending.pop(ref)
            try:
                reply = ray.get(ref)
            except _DEAD as exc:
                self.retries += 1
                self._mark_down(wk)
                if tries + 1 > limit:
                    raise PoolError(f"worker batch failed {tries + 1} times; last worker {wk}: {exc}") from exc
                alt = self._alternative(wk)
                pending[self._send(alt, x_arg, req)] = (alt, batch, req, a, b, tries + 1, x_arg)
                continue
            if "stale" in reply:
                raise PoolError(f"worker {wk} cannot see table version {req['version']} "
                                f"(it has {reply['stale']}); is {self.path}.experts/ shared with it?")
            scatter(batch, reply, slot_out[a:b], None if shared is None else shared[a:b])
            self.tokens[wk] += batch.n_rows()
            self.busy[wk] += reply.get("busy_s", 0.0)

    # ------------------------------------------------------------------ table
    def add_expert(self, layer, weights, router_row, bias=0.0):
        """Persist a new expert (Router engine), let every live worker see it; returns its id."""
        new_id = int(self.engine.add_expert(layer, weights, router_row, bias=bias))
        self._refresh_workers()
        self.placement.add_expert(layer, new_id)
        return new_id

    def remove_expert(self, layer, e):
        self.engine.remove_expert(layer, e)
        self._refresh_workers()
        self.placement.remove_expert(layer, int(e))
        return True

    def _refresh_workers(self):
        """Workers re-read the manifest now (a worker that is down reads it when it restarts)."""
        self._refresh_down()
        refs = {i: self.workers[i].refresh.remote() for i in self.balancer.live()}
        for i, ref in refs.items():
            try:
                ray.get(ref)
            except _DEAD:
                self._mark_down(i)

    def list_experts(self):
        return self._experts()

    def rebalance(self, replicas=None):
        """Recompute homes and replicas from recent loads; the next batch uses the new placement."""
        if replicas is not None:
            if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
                raise InvalidArgument(f"replicas must be an integer >= 0, got {replicas!r}")
            self.replicas = replicas
        self.placement = plan(self._experts(), self.n, loads=self.meter.loads(), replicas=self.replicas)
        self.meter.age()
        self.rebalances += 1
        return self.placement.to_dict()

    # ------------------------------------------------------------------ status
    def ready(self):
        return {"workers": self.n, "pids": [i["pid"] for i in self.info], "router_pid": os.getpid()}

    def stats(self, timeout=10.0):
        self._refresh_down()
        refs = {i: self.workers[i].stats.remote() for i in self.balancer.live()}
        per = []
        for i in range(self.n):
            entry = {"index": i, "alive": i not in self.down, "tokens": self.tokens[i],
                     "last_batch_tokens": self.last_rows[i], "busy_s": self.busy[i],
                     "experts": len(self.placement.experts_on(i)), "pid": self.info[i]["pid"]}
            if i in refs:
                try:
                    s = ray.get(refs[i], timeout=timeout)
                    entry.update(pid=s["pid"], cpus=s["cpus"], cache=s["engine"], numa=s["numa"],
                                 requests=s["requests"], version=s["version"])
                except (GetTimeoutError,) + _DEAD as exc:
                    entry.update(alive=False, error=str(exc))
            entry["node"] = self.info[i].get("node")
            per.append(entry)
        return {"workers": per, "retries": self.retries, "batches": self.batches,
                "tokens": sum(self.tokens), "version": ea.table_version(self.engine), "rebalances": self.rebalances, "off_home": self.off_home, "timing": dict(self.timing),
                "placement": self.placement.to_dict(),
                "balancer": self.balancer.state(), "routing_policy": self.cfg.routing_policy, "config": self.cfg,
                "experts": {str(l): len(ids) for l, ids in self._experts().items()}}

    def worker_pids(self):
        return [ray.get(w.ping.remote())["pid"] for w in self.workers]

    def shutdown(self):
        for w in self.workers:
            try:
                ray.kill(w, no_restart=True)
            except Exception:
                pass
        self.engine.close()
        return True


RouterActor = ray.remote(Router)
