"""Pool: the user-facing handle of a Router actor and its ExpertWorker actors.

Role: `with Pool(path, workers=2) as pool: y = pool.moe_forward(layer, x)` gives the
same bits as `MoeExecutor(path).moe_forward(layer, x)`. With routing_at="caller" (default) this
process routes, balances and combines itself (an ExpertClient over the Router's worker
handles: one Ray hop per worker and micro-batch); with "router" it sends each layer batch
to the Router actor, which does. With `name=...` the actors are named and detached (a
long-lived service in namespace "colibri") and other processes join it with `Pool.attach(name)`.

The driver spawns the workers (router.spawn_workers) and hands them to the Router, which Ray restarts
up to max_restarts times: killing the Router costs the control plane a restart, never the workers
(the caller-routed data path does not notice at all). A call in flight when it died is retried once
if it changes nothing (stats, route, moe_forward, ...); otherwise, or when the Router stays dead, the
error is a PoolError that says the Router died, not that the workers are down.
"""
import threading
import time

import numpy as np
import ray
from ray.exceptions import ActorUnavailableError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..errors import ColibriError, PoolError
from .config import config_from_kwargs
from .ray_setup import NAMESPACE, connect, resolve_placement
from . import executor_access as ea
from .client import DEAD, INLINE_BYTES, ExpertClient
from .router import RouterActor, spawn_workers


def _router_name(name):
    return f"{name}:router"


def _first_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _unwrap(ref):
    """ray.get that re-raises colibri errors from actors as themselves."""
    try:
        return ray.get(ref)
    except RayTaskError as exc:
        if isinstance(exc.cause, ColibriError):
            raise exc.cause from None
        raise


class Pool:
    def __init__(self, path, config=None, ray_address=None, **options):
        """Pool(path, PoolConfig(...)) or Pool(path, workers=2, ...) with PoolConfig's fields as keywords
        (worker_delay_s= / source_delay_s= still accepted: they land in config.hooks)."""
        cfg = config_from_kwargs(config, **options)  # InvalidArgument naming the option, before any actor
        self._check_model(path)
        self.path = str(path)
        self._started_ray = connect(ray_address)
        self._owner = True
        try:
            cfg = resolve_placement(cfg)
        except Exception:
            if self._started_ray:
                ray.shutdown()
            raise
        self.config, self.name, self.namespace = cfg, cfg.name, cfg.namespace
        options = dict(num_cpus=0, max_restarts=cfg.max_restarts, max_task_retries=0, max_concurrency=1,
                       scheduling_strategy=
                       NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False))
        if cfg.name:
            if self._exists(cfg.name, cfg.namespace):
                raise PoolError(f"a pool named {cfg.name!r} is already running in Ray namespace {cfg.namespace!r}")
            options.update(name=_router_name(cfg.name), lifetime="detached", namespace=cfg.namespace)
        names, self._workers = spawn_workers(self.path, cfg)
        self._router = RouterActor.options(**options).remote(self.path, cfg, names)
        try:
            self._ready = self._call("ready")
            self._client = self._make_client()
        except Exception:
            self._kill_router()
            if self._started_ray:
                ray.shutdown()
            raise

    def _make_client(self):
        """Routing in this process (routing_at="caller"), or None (the Router routes)."""
        self._turn = threading.Lock()
        h = self._call("handles")
        self.config = h["config"]
        if self.config.routing_at != "caller":
            return None
        from ..moe_executor import MoeExecutor
        engine = MoeExecutor(h["path"], threads=1)
        client = ExpertClient(engine, h["workers"], h["config"], h["info"])
        client.turn = self._turn
        return client

    @staticmethod
    def _check_model(path):
        from ..format.reader import open_model
        open_model(path).close()  # FormatError naming the file, before any actor starts

    @staticmethod
    def _exists(name, namespace=NAMESPACE):
        try:
            ray.get_actor(_router_name(name), namespace=namespace)
            return True
        except ValueError:
            return False

    @classmethod
    def attach(cls, name, namespace=NAMESPACE, ray_address="auto"):
        """Join a running named pool (started by `colibri pool start` or Pool(name=...))."""
        started = connect(ray_address)
        try:
            router = ray.get_actor(_router_name(name), namespace=namespace)
        except ValueError:
            raise PoolError(f"no pool named {name!r} in Ray namespace {namespace!r}") from None
        pool = cls.__new__(cls)
        pool.name, pool.namespace, pool._router = name, namespace, router
        pool._owner, pool._started_ray, pool.path, pool._workers = False, started, None, []
        pool._ready = pool._call("ready")
        pool._client = pool._make_client()
        return pool

    @property
    def w8a8(self):
        """The workers' arithmetic (PoolConfig.w8a8): True = w8a8/w4a8, False = exact weights."""
        return bool(self._ready.get("w8a8", True))

    # ---------------------------------------------------------------- work
    def moe_forward(self, layer, x):
        if self._client is not None:
            with self._turn:
                return self._client.moe_forward(int(layer), x)
        if isinstance(x, np.ndarray) and x.nbytes >= INLINE_BYTES:
            x = [ray.put(x)]  # one copy into the object store; Router and workers all read it
        return self._call("moe_forward", int(layer), x)

    def route(self, layer, x):
        if self._client is not None:
            with self._turn:
                return self._client.route(int(layer), x)
        return self._call("route", int(layer), x)

    def add_expert(self, layer, weights, router_row, bias=0.0):
        new_id = self._call("add_expert", int(layer), weights, router_row, bias, retry=False)
        self._sync_table()
        return new_id

    def remove_expert(self, layer, expert):
        out = self._call("remove_expert", int(layer), int(expert), retry=False)
        self._sync_table()
        return out

    def _sync_table(self):
        if self._client is not None:
            with self._turn:
                self._client.maybe_refresh()

    def list_experts(self):
        return self._call("list_experts")

    def rebalance(self, replicas=None):
        """Recompute homes and replicas from recent loads (optionally with a new replica budget)."""
        if self._client is not None:
            with self._turn:
                return self._client.rebalance(replicas)
        return self._call("rebalance", replicas)

    def counters(self):
        """This handle's routing counters (None when the Router routes)."""
        if self._client is None:
            return None
        with self._turn:
            self._client._poll_down(timeout=0)  # take back restarted workers before reporting
            return self._client.counters()

    def stats(self):
        if self._client is None:
            return self._call("stats")
        return self._call("stats", [self.counters()], "caller")

    def kv_identity(self):
        """What KV computed through this pool depends on besides the tokens: the version of its expert set,
        which a hot-add or removal from any process changes. An LLM over the pool keys its prefix cache with
        it (so prefix caching is on by default there, and never reuses KV of other experts)."""
        if self._client is None:
            return self._call("table_version")
        with self._turn:
            self._client.maybe_refresh()
            return ea.table_version(self._client.executor)

    def count_heat(self):
        """From now on count the tokens routed to each expert through this handle (heat())."""
        if self._client is None:
            return self._call("count_heat")
        self._client.heat.on = True

    def heat(self):
        """Tokens routed to each expert through this handle ({"layer": [count per expert]}): counted by this
        process's ExpertClient, or by the Router when it routes."""
        if self._client is None:
            return self._call("heat")
        with self._turn:
            return self._client.heat.report()

    def worker_pids(self):
        return self._call("worker_pids")

    def _call(self, method, *args, retry=True):
        """The Router's `method`; a Router that died mid-call (Ray restarts it) is retried once when
        the call changes nothing, and reported as a Router death otherwise."""
        if not retry:
            self._call("ready")                        # a restarting Router first comes back
        deadline = time.monotonic() + self.config.restart_timeout_s if getattr(self, "config", None) else 0
        tries = 2 if retry else 1
        while True:
            try:
                return _unwrap(getattr(self._router, method).remote(*args))
            except ActorUnavailableError as exc:      # restarting: the call did not run; wait for it
                cause = _first_line(exc)
                if not retry or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            except DEAD as exc:                        # died with the call in flight (or for good)
                cause = _first_line(exc)
                tries -= 1
                if tries <= 0:
                    break
        what = "Ray restarts it (up to pool.max_restarts times): check list_experts() before retrying" \
            if not retry else "Ray did not bring it back (pool.max_restarts used up?)"
        raise PoolError(f"the pool's Router actor died during {method}() ({cause}); {what}. "
                        f"The expert workers are not affected by a Router death.") from None

    # ---------------------------------------------------------------- lifetime
    def _kill_router(self):
        try:
            ray.get(self._router.shutdown.remote(), timeout=30)
        except Exception:
            pass
        for actor in [self._router] + list(getattr(self, "_workers", [])):
            try:
                ray.kill(actor, no_restart=True)    # the workers too, if the Router could not
            except Exception:
                pass

    def shutdown(self, stop_service=None):
        """Stop the actors if this handle created them (or stop_service=True); detach otherwise."""
        if self._router is None:
            return
        if stop_service if stop_service is not None else self._owner and not self.name:
            self._kill_router()
        self._router = None
        if getattr(self, "_client", None) is not None:
            self._client.executor.close()
            self._client = None
        if self._started_ray:
            ray.shutdown()

    def close(self):
        self.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown(stop_service=self._owner)
