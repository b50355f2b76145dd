"""`colibri pool start CONFIG | status | stop | list`: the long-lived, named Ray pool service.

Role: CLI shell over colibri_dist.pool (Pool(name=...), Pool.attach) and
colibri_dist.pool.service (where the pool's Ray lives). `start` returns once the
named, detached actors are up; they keep serving after the command exits.
"""
import json
import sys
import time

from ..errors import PoolError
from .common import DEFAULT_POOL as DEFAULT_NAME
from .common import add_pool_name, warn_workers


def register(subparsers):
    parser = subparsers.add_parser("pool", help="start, inspect and stop a named Ray worker pool")
    sub = parser.add_subparsers(dest="pool_command", metavar="{start,status,stop,list}")
    sub.required = True

    p = sub.add_parser("start", help="start a named pool from a YAML config (model, pool, routing)")
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--pool", "--name", dest="pool", default=None, metavar="NAME",
                   help="pool name (default: pool.name in the config, else 'default'; --name is the old spelling)")
    p.add_argument("--address", default=None,
                   help="join this Ray (host:port or 'auto'); default pool.ray_address, else start a loopback head")
    p.set_defaults(func=run_start)

    for verb, helptext, func in (("status", "workers, experts, cache and load of a running pool", run_status),
                                 ("stop", "stop a running pool (and the Ray head it started)", run_stop)):
        q = sub.add_parser(verb, help=helptext)
        add_pool_name(q)
        q.add_argument("--address", default=None, help="Ray address (default: the one recorded at start)")
        if verb == "status":
            q.add_argument("--json", action="store_true", help="print the raw stats JSON")
        else:
            q.add_argument("--keep-ray", action="store_true", help="leave the Ray head running")
        q.set_defaults(func=func)
    q = sub.add_parser("list", help="the pools started with `colibri pool start` on this machine, and whether "
                                    "each still runs")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=run_list)


def load_config(path):
    from ..config import load_service_config
    return load_service_config(path)


def run_start(args):
    from ..config.engine_args import of_service
    from ..front import open_pool
    from ..pool import service
    from ..pool.names import check_name
    if args.pool is not None:
        check_name(args.pool)            # before the config, Ray or any path sees it
    cfg = load_config(args.config)
    if not cfg.model:
        raise PoolError(f"{args.config}: no `model:` to serve")
    name = check_name(args.pool or cfg.pool.name or DEFAULT_NAME)
    warn_workers(cfg.pool.workers, "pool.workers")
    address = args.address or cfg.pool.ray_address or service.resolve_address(name)
    head_pid = None
    if address is None:
        address, head_pid = service.start_local_head(name)
        print(f"started a loopback Ray head at {address} (pid {head_pid})")
    try:
        args = of_service(cfg, ray_address=address)
        pool = open_pool(args.replace(pool_options=dict(args.pool_options, name=name)))
    except BaseException:
        if head_pid is not None:
            service.stop_local_head(head_pid)
        raise
    service.write_state(name, {"name": name, "namespace": pool.namespace, "address": address,
                               "head_pid": head_pid, "model": cfg.model, "started": time.time()})
    print(f"pool {name!r} running: {cfg.pool.workers} workers, model {cfg.model}, Ray {address}")
    pool.shutdown()  # detach; the named actors keep running
    return 0


def _attach(args):
    from ..front import attach
    return attach(args.pool, ray_address=args.address)


def run_status(args):
    pool = _attach(args)
    stats = pool.stats()
    pool.shutdown()
    if args.json:
        json.dump(stats, sys.stdout, indent=2, default=str)
        print()
        return 0
    print(f"pool {args.pool!r}: {stats['batches']} batches, {stats['tokens']} token-slots, "
          f"{stats['retries']} retries, table version {stats['version']}, routing {stats['routing_policy']}")
    print("experts per layer: " + ", ".join(f"{l}: {n}" for l, n in stats["experts"].items()))
    print(f"{'worker':>6} {'alive':>5} {'pid':>8} {'cpus':<12} {'experts':>7} {'tokens':>10} {'cache hit':>9}")
    for w in stats["workers"]:
        cache = w.get("cache") or {}
        hits = cache.get("hit_rate", cache.get("hits", "-"))
        cpus = ",".join(str(c) for c in (w.get("cpus") or [])) or "-"
        print(f"{w['index']:>6} {str(w['alive']):>5} {w['pid']:>8} {cpus:<12} {w['experts']:>7} "
              f"{w['tokens']:>10} {str(hits):>9}")
    return 0


def run_stop(args):
    from ..pool import service
    pool = _attach(args)
    pool.shutdown(stop_service=True)
    state = service.read_state(args.pool)
    if state and state.get("head_pid") and not args.keep_ray:
        stopped = service.stop_local_head(state["head_pid"])
        print(f"stopped the Ray head (pid {state['head_pid']})" if stopped else
              f"Ray head pid {state['head_pid']} did not exit; stop it by hand")
    service.remove_state(args.pool)
    print(f"pool {args.pool!r} stopped")
    return 0


def pool_records():
    """[{name, address, model, head_pid, running}] of the state files `pool start` wrote."""
    import os

    from ..pool import service
    out = []
    for fname in sorted(os.listdir(service.state_dir())):
        if not fname.endswith(".json"):
            continue
        state = service.read_state(fname[:-5]) or {}
        head = state.get("head_pid")
        out.append({"name": state.get("name", fname[:-5]), "address": state.get("address"),
                    "model": state.get("model"), "head_pid": head, "started": state.get("started"),
                    "running": head is None or service.pid_alive(head)})
    return out


def run_list(args):
    records = pool_records()
    if args.json:
        json.dump(records, sys.stdout, indent=2)
        print()
        return 0
    if not records:
        print("no pools recorded (start one with `colibri pool start CONFIG`)")
        return 0
    for r in records:
        state = "running" if r["running"] else "stale (its Ray head is gone)"
        print(f"{r['name']}: {state}, Ray {r['address']}, model {r['model']}")
    return 0
