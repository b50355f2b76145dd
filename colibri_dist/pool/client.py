"""ExpertClient: one caller's data path to the shared ExpertWorkers (routing + balancing + failover).

Role in the data flow (one call = one MoE layer batch, in whatever process holds the client:
the driver of a Pool, each sequence runner, or the Router actor for routing="router"):
    route (a MoeExecutor's native Runtime.route)  ->  group per expert
    -> this client's balancer picks a replica per expert  ->  one request per worker per micro-batch
    -> all micro-batches in flight, replies gathered with ray.wait
    -> scatter into slot_out[t, j] / shared[t]  ->  native.combine  (same bits as the MoeExecutor)
Every runner holds its own client, so no actor sits on the path of every token: each balances
its own traffic over the shared workers (same deterministic placement, so an expert's home is
the same worker for every runner: cache locality), and a runner lost takes only its own
routing state with it. A request whose worker dies is re-sent to another live worker (or to the
restarted actor); rows are credited to a worker only when its reply arrives.

`turn`: an optional lock the caller holds around moe_forward; the client releases it while it
waits for replies, so another micro-batch of the same runner (two-batch overlap) can run its
attention meanwhile. All client state is touched only while holding the turn.
"""
import contextlib
import os
import time

import numpy as np
import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

from ..errors import InvalidArgument, PoolError
from ..routing.balancer import make_balancer
from ..routing.heat import ExpertHeat
from ..routing.placement import LoadMeter, plan
from ..routing.policy import BalancedRouting
from . import executor_access as ea
from .dispatch import build_batches, group_by_expert, scatter, shared_chunks, split_hot

INLINE_BYTES = 100 * 1024  # smaller batches travel inline in each request (a put costs ~ms)
DEAD = (RayActorError, ActorUnavailableError)


class ExpertClient:
    def __init__(self, engine, workers, cfg, info=None):
        """engine: a MoeExecutor on the model (routing only; no expert runs on it); workers: the pool's
        ExpertWorker actor handles; cfg: its PoolConfig."""
        from .. import native
        self.native, self.executor, self.workers, self.cfg = native, engine, list(workers), cfg
        self.path, self.n = str(engine.model.path), len(self.workers)
        self.info = list(info) if info is not None else ray.get([w.ping.remote() for w in self.workers])
        self.balancer = make_balancer(cfg.balancer_spec, self.n)
        self.layers = ea.moe_layers(engine)
        self.replicas = cfg.replicas
        self.placement = plan(self.experts(), self.n, replicas=self.replicas)
        self.meter = LoadMeter()
        self.heat = ExpertHeat()             # tokens this client routed to each expert, once on (jobs' heat maps)
        bal = cfg.balancer_spec
        self.policy = (BalancedRouting(bal.get("window", 64), bal.get("threshold", 1.8))
                       if cfg.routing_policy == "balanced" else None)
        self.turn = None
        self.down = {}                 # worker -> pending ping ref
        self.tokens = [0] * self.n
        self.last_rows = [0] * self.n  # rows per worker in the last layer batch
        self.busy = [0.0] * self.n     # seconds of expert compute reported by each worker
        self.timing = {"route_dispatch_s": 0.0, "collect_s": 0.0, "combine_s": 0.0}
        self.retries = self.off_home = self.batches = self.rebalances = 0
        self.shared_cache = {}
        self._manifest = self._manifest_stamp()

    # ------------------------------------------------------------------ table
    def experts(self):
        return self.executor.list_experts()

    def _manifest_stamp(self):
        from ..store.segments import segments_dir
        try:
            st = os.stat(os.path.join(segments_dir(self.executor.model.path), "MANIFEST.json"))
        except (OSError, AttributeError, TypeError):
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def maybe_refresh(self):
        """Re-read the hot-add manifest when another process changed it (one stat per call)."""
        stamp = self._manifest_stamp()
        if stamp != self._manifest:
            self._manifest = stamp
            self.executor.refresh()
            self.shared_cache.clear()

    def rebalance(self, replicas=None):
        if replicas is not None:
            if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
                raise InvalidArgument(f"replicas must be an integer >= 0, got {replicas!r}")
            self.replicas = replicas
        self.placement = plan(self.experts(), self.n, loads=self.meter.loads(), replicas=self.replicas)
        self.meter.age()
        self.rebalances += 1
        return self.placement.to_dict()

    # ------------------------------------------------------------------ workers down / back
    def mark_down(self, i):
        self.balancer.mark_dead(i)
        self.down.setdefault(i, self.workers[i].ping.remote())

    def refresh_down(self):
        """Take back workers whose ping answered; when all are down, wait for Ray to restart one."""
        patience = self.cfg.restart_timeout_s
        deadline = time.monotonic() + patience
        self._poll_down(timeout=0)
        while self.down and len(self.down) >= self.n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolError(f"all {self.n} workers are down and none came back within {patience} s "
                                f"(Ray max_restarts {self.cfg.max_restarts} may be used up)")
            with self._released():
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
            except DEAD:
                self.down[i] = self.workers[i].ping.remote()
                continue
            self.info[i] = info
            del self.down[i]
            self.balancer.mark_alive(i)

    def _back_off(self, tries):
        """Before a re-send: wait a little (an actor that was only unreachable answers its ping again,
        and is taken back), and when every worker is down wait for Ray to restart one."""
        with self._released():
            time.sleep(min(0.5, 0.02 * 2 ** tries))
        self._poll_down(timeout=0)
        if not self.balancer.live():
            self.refresh_down()

    def _alternative(self, failed):
        live = [w for w in self.balancer.live() if w != failed]
        if not live:
            return failed  # nobody else: wait for Ray to restart this actor
        return min(live, key=lambda w: (self.balancer.assigned_rows[w], w))

    @contextlib.contextmanager
    def _released(self):
        if self.turn is None:
            yield
            return
        self.turn.release()
        try:
            yield
        finally:
            self.turn.acquire()

    # ------------------------------------------------------------------ routing
    def check_x(self, layer, x):
        if layer not in self.layers:
            raise InvalidArgument(f"layer {layer} is not an MoE layer of {self.path} (MoE layers: {self.layers})")
        x = np.asarray(x)
        h = ea.hidden(self.executor)
        if x.ndim != 2 or x.shape[1] != h:
            raise InvalidArgument(f"layer {layer}: x must have shape [n, {h}], got {list(x.shape)}")
        if x.dtype != np.float32:
            raise InvalidArgument(f"layer {layer}: x must be float32, got {x.dtype}")
        if not np.isfinite(x).all():  # the balanced policy does not go through the MoeExecutor's check
            raise InvalidArgument(f"layer {layer}: x contains NaN or Inf (non-finite input is rejected)")
        return np.ascontiguousarray(x)

    def _route(self, layer, x):
        if self.policy is None:
            return self.executor.route(layer, x)
        router, bias, gating, ids = ea.router_of(self.executor, layer)
        idx, w = self.policy.route(layer, x, router, gating, bias)
        return ids[idx].astype(np.int32), w

    def route(self, layer, x):
        self.maybe_refresh()
        return self._route(layer, self.check_x(layer, x))

    def _has_shared(self, layer):
        if layer not in self.shared_cache:
            self.shared_cache[layer] = ea.has_shared(self.executor, layer)
        return self.shared_cache[layer]

    # ------------------------------------------------------------------ forward
    def moe_forward(self, layer, x, x_ref=None):
        """x float32 [n, hidden] -> y float32 [n, hidden]; x_ref: x already in the object store."""
        self.maybe_refresh()
        x = self.check_x(layer, x)
        x_arg = x_ref if x_ref is not None else (x if x.nbytes < INLINE_BYTES else ray.put(x))
        self.refresh_down()
        n, k, h = len(x), ea.top_k(self.executor), x.shape[1]
        if n == 0:
            return np.zeros((0, h), np.float32)
        idx_all, w_all = np.zeros((n, k), np.int32), np.zeros((n, k), np.float32)
        slot_out = np.zeros((n, k, h), np.float32)
        shared = np.zeros((n, h), np.float32) if self._has_shared(layer) else None
        pending, t0 = {}, time.perf_counter()
        for a in range(0, n, self.cfg.micro_batch):
            b = min(n, a + self.cfg.micro_batch)
            idx, w = self._route(layer, x[a:b])
            idx_all[a:b], w_all[a:b] = idx, w
            for wk, batch, req in self._plan_micro(layer, a, idx, w, shared is not None):
                pending[self._send(wk, x_arg, req)] = (wk, batch, req, a, b, 0)
        t1 = time.perf_counter()
        before = list(self.tokens)
        self._collect(pending, x_arg, slot_out, shared)
        self.last_rows = [a - b for a, b in zip(self.tokens, before)]
        self.batches += 1
        if self.heat.on:
            self.heat.add(layer, idx_all)
        t2 = time.perf_counter()
        y = self.native.combine(w_all, slot_out, shared)
        for key, dt in (("route_dispatch_s", t1 - t0), ("collect_s", t2 - t1), ("combine_s", time.perf_counter() - t2)):
            self.timing[key] += dt
        return y

    def _plan_micro(self, layer, offset, idx, w, with_shared):
        groups = group_by_expert(idx)
        self.meter.add(layer, list(groups), [len(t) for t, _ in groups.values()])
        if self.balancer.kind == "token-bucket":
            groups = split_hot(groups, lambda e: len(self._replicas(layer, e)), len(self.balancer.live()))
        else:
            groups = {(e, 0): ts for e, ts in groups.items()}
        loads = {key: (float(w[t, s].sum()), len(t)) for key, (t, s) in groups.items()}
        total = sum(r for _, r in loads.values())
        if total <= self.cfg.coalesce_rows:
            assign = self._coalesce(layer, loads)
        else:
            assign = self.balancer.assign(loads, lambda key: self._replicas(layer, key[0]),
                                          expert_of=lambda key: (layer, key[0]), among=self._among(total))
        self.off_home += sum(1 for key, wk in assign.items() if wk != self._replicas(layer, key[0])[0])
        spans = shared_chunks(len(idx), self.balancer.live()) if with_shared else None
        version = ea.table_version(self.executor)
        for wk, batch in build_batches(groups, assign, spans).items():
            yield wk, batch, batch.request(layer, version, offset)

    def _among(self, total):
        """min_request_rows: a micro-batch of R rows uses at most R // min_request_rows workers (fewer
        Ray calls per layer in big pools), the ones with the fewest recent rows; None = all live."""
        m = self.cfg.min_request_rows
        live = self.balancer.live()
        if not m or total // m >= len(live):
            return None
        recent = getattr(self.balancer, "recent", None) or [0.0] * self.n
        return sorted(live, key=lambda w: (recent[w], w))[:max(1, total // m)]

    def _coalesce(self, layer, loads):
        """A tiny micro-batch (a few decode tokens) goes whole to ONE worker: one Ray call instead of
        one per worker (the call, not the compute, is the cost there). The worker is the live home of
        most of its rows (ties: fewer recent rows, lower id), so hot experts mostly stay home."""
        live = set(self.balancer.live())
        votes = {}
        for key, (_, rows) in loads.items():
            home = next((w for w in self._replicas(layer, key[0]) if w in live), None)
            if home is not None:
                votes[home] = votes.get(home, 0) + rows
        recent = getattr(self.balancer, "recent", None) or [0.0] * self.n
        wk = max(votes or {w: 0 for w in live}, key=lambda w: (votes.get(w, 0), -recent[w], -w))
        for key, (mass, rows) in loads.items():
            self.balancer.record((layer, key[0]), wk, mass, rows)
        return {key: wk for key in loads}

    def _replicas(self, layer, e):
        try:
            return self.placement.replicas_of((layer, e))
        except InvalidArgument:
            return (self.placement.add_expert(layer, e),)

    def _send(self, wk, x_arg, req):
        return self.workers[wk].run.remote(x_arg, req)

    def _collect(self, pending, x_arg, slot_out, shared):
        limit = 2 * self.n + 4
        while pending:
            with self._released():  # `pending` is this call's own: safe to touch without the turn
                ref = next(iter(pending)) if len(pending) == 1 else ray.wait(list(pending), num_returns=1)[0][0]
                wk, batch, req, a, b, tries = pending.pop(ref)
                try:
                    reply = ray.get(ref)
                except DEAD as exc:
                    reply = exc
            if isinstance(reply, BaseException):  # the worker died: re-send this request elsewhere
                exc = reply
                self.retries += 1
                self.mark_down(wk)
                if tries + 1 > limit:
                    raise PoolError(f"worker batch failed {tries + 1} times; last worker {wk} (live: "
                                    f"{self.balancer.live()}): {exc}") from exc
                self._back_off(tries)
                alt = self._alternative(wk)
                pending[self._send(alt, x_arg, req)] = (alt, batch, req, a, b, tries + 1)
                continue
            if "stale" in reply:
                raise PoolError(f"worker {wk} cannot see table version {req['version']} "
                                f"(it has {reply['stale']}); is {self.path}.experts/ shared with it?")
            scatter(batch, reply, slot_out[a:b], None if shared is None else shared[a:b])
            self.tokens[wk] += batch.n_rows()
            self.busy[wk] += reply.get("busy_s", 0.0)

    # ------------------------------------------------------------------ status
    def counters(self):
        """This client's share of the pool statistics (merged over clients by the facades)."""
        return {"tokens": list(self.tokens), "last_batch_tokens": list(self.last_rows), "busy_s": list(self.busy),
                "retries": self.retries, "batches": self.batches, "off_home": self.off_home,
                "rebalances": self.rebalances, "timing": dict(self.timing), "balancer": self.balancer.state(),
                "down": sorted(self.down), "placement": self.placement}

    def worker_stats(self, timeout=10.0):
        """Per worker: its own stats() (or alive=False and the error)."""
        self.refresh_down()
        refs = {i: self.workers[i].stats.remote() for i in self.balancer.live()}
        out = []
        for i in range(self.n):
            entry = {"index": i, "alive": i not in self.down, "pid": self.info[i]["pid"],
                     "node": self.info[i].get("node")}
            if i in refs:
                try:
                    s = ray.get(refs[i], timeout=timeout)
                    entry.update(pid=s["pid"], cpus=s["cpus"], cache=s["engine"], numa=s["numa"],
                                 requests=s["requests"], version=s["version"], rows=s["rows"], node=s["node"])
                    self.info[i] = dict(self.info[i], pid=s["pid"], node=s["node"])
                except (GetTimeoutError,) + DEAD as exc:
                    entry.update(alive=False, error=str(exc))
            out.append(entry)
        return out
