"""Ray Serve deployment of the same app: `colibri serve --ray-serve` / colibri_dist.serve.deployment(...).

Role in the data flow: each Serve replica opens the model (its own dense weights, KV cache and engine
thread; with --runners M its own M sequence runners over the shared workers instead), builds the same ServerState and FastAPI app (serve.ingress with __serve_build_asgi_app__), and
Ray Serve's proxy spreads HTTP requests over the replicas, scaling between min_replicas and max_replicas
by ongoing requests. With workers > 0, `run` first starts ONE named expert pool and every replica
attaches to it (cfg.pool), so replicas share the expert workers. The only module of serve/ that imports
ray. An admin expert change drains the replica that received it; the others see the pool's change at
their next step (say so to users: it is one pool's state shared by several engines).
"""
import dataclasses
import os
import sys
import time

from ray import serve as ray_serve

from .config import ServeConfig, is_loopback

APP_NAME = "colibri"
# What cannot be kept on the loopback bind (issue 31, defect 8): Ray Serve 2.60 starts each replica's
# inter-deployment gRPC server on "[::]:0" (ray/serve/_private/replica.py, Replica._on_initialized), with no
# option to change it; the HTTP proxy, Ray itself and our pool stay on 127.0.0.1.
REPLICA_GRPC_NOTE = ("colibri serve --ray-serve: note: Ray Serve opens each replica's internal gRPC port on all "
                     "interfaces (not configurable in Ray 2.60); the HTTP port and Ray stay on loopback. On a shared "
                     "network, firewall this host or serve without --ray-serve.")


class _Replica:
    def __init__(self, cfg):
        from .launch import build_state, open_llm, open_runners
        self.cfg = cfg
        self.llm, self.pool = open_llm(cfg)
        self.runner_set = open_runners(cfg, self.pool)       # --runners M: this replica's own M runners
        self.state = build_state(cfg, self.llm, self.pool, self.runner_set)

    def __serve_build_asgi_app__(self):
        from .app import build_app
        return build_app(self.state)

    def __del__(self):
        try:
            self.state.backend.close()
            if self.runner_set is not None:
                self.runner_set.shutdown()
            self.llm.close()
        except Exception:
            pass


def deployment(model_or_cfg, min_replicas=1, max_replicas=1, num_cpus=0, **options):
    """A bound Ray Serve application of the server (serve.run(app) starts it)."""
    cfg = model_or_cfg if isinstance(model_or_cfg, ServeConfig) else ServeConfig(model=str(model_or_cfg), **options)
    for name, v in (("min_replicas", min_replicas), ("max_replicas", max_replicas)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            from ..errors import InvalidArgument
            raise InvalidArgument(f"{name} must be an integer >= 1, got {v!r}")
    if max_replicas < min_replicas:
        from ..errors import InvalidArgument
        raise InvalidArgument(f"max_replicas ({max_replicas}) must be >= min_replicas ({min_replicas})")
    scale = ({"num_replicas": min_replicas} if min_replicas == max_replicas else
             {"autoscaling_config": {"min_replicas": min_replicas, "max_replicas": max_replicas,
                                     "target_ongoing_requests": max(1, cfg.max_num_seqs // 2)}})
    cls = ray_serve.ingress()(type("ColibriServer", (_Replica,), {}))
    dep = ray_serve.deployment(cls, name="ColibriServer", ray_actor_options={"num_cpus": num_cpus},
                               max_ongoing_requests=cfg.max_num_seqs + cfg.max_waiting, **scale)
    return dep.bind(cfg)


def start(cfg, min_replicas=1, max_replicas=1, ray_address=None, blocking=False):
    """Connect Ray (loopback by default), start one shared expert pool if cfg.workers, run the app on
    cfg.host:cfg.port. Returns the url (and, with blocking=True, serves until Ctrl-C or SIGTERM, then
    stops Serve, the pool and the Ray it started, and returns (url, None))."""
    from ..pool.ray_setup import connect, disconnect
    from .signals import stop_on_sigterm
    if blocking:
        stop_on_sigterm()                     # kept over ray.init (pool/ray_setup.py)
    connected, pool, url = connect(ray_address), None, None
    try:
        pool, cfg = _shared_pool(cfg)
        url = _run_app(cfg, min_replicas, max_replicas)
        if not blocking:
            return url, pool
        print(f"colibri serve (Ray Serve, {min_replicas}-{max_replicas} replicas): {cfg.model} on {url}/v1; "
              f"Ctrl-C or SIGTERM stops", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        if not blocking:
            raise
    finally:
        if blocking:
            stop(pool)
            if connected:
                disconnect()
    return url, None


def _shared_pool(cfg):
    """With cfg.workers: one named pool every replica attaches to -> (pool, cfg naming it); else (None, cfg)."""
    if not cfg.workers:
        return None, cfg
    from ..front import open_pool
    name = f"serve-{os.getpid()}"
    args = cfg.engine_args()
    pool = open_pool(args.replace(pool_options=dict(args.pool_options, name=name)))
    return pool, dataclasses.replace(cfg, workers=0, pool=name)


def _run_app(cfg, min_replicas, max_replicas):
    if is_loopback(cfg.host):
        print(REPLICA_GRPC_NOTE, file=sys.stderr, flush=True)
    ray_serve.start(http_options={"host": cfg.host, "port": cfg.port})
    ray_serve.run(deployment(cfg, min_replicas, max_replicas), name=APP_NAME, route_prefix="/")
    return f"http://{cfg.host}:{cfg.port}"


def stop(pool=None):
    try:
        ray_serve.shutdown()
    finally:
        if pool is not None:
            pool.shutdown(stop_service=True)


def run(cfg, min_replicas=1, max_replicas=1, ray_address=None):
    start(cfg, min_replicas, max_replicas, ray_address, blocking=True)
    return 0
