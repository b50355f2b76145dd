"""Connecting to Ray: a private local Ray on loopback, or an existing cluster.

Role: the first step of every Pool. `ray_address=None` starts a local Ray bound
to 127.0.0.1 with token auth (auth.py; no dashboard, quiet logs); "auto" or "host:port" joins a running
cluster (e.g. one started with cluster/start-head.sh or `ray start --head`).
"""
import contextlib
import logging
import os
import re
import signal
import threading

import ray

from ..errors import InvalidArgument, PoolError
from .auth import ensure_token_auth

NAMESPACE = "colibri"
_NUMA_KEY = re.compile(r"numa_(\d+)")


def connect(ray_address=None, num_cpus=None):
    """Make sure this process is connected to Ray; True when this call connected it (so it disconnects)."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if ray.is_initialized():
        return False
    common = dict(include_dashboard=False, logging_level=logging.WARNING, namespace=NAMESPACE,
                  configure_logging=True)
    with _sigterm_kept():
        if ray_address is None:
            ensure_token_auth()              # a local Ray is never open to tokenless processes
            ray.init(address="local", _node_ip_address="127.0.0.1", num_cpus=num_cpus or os.cpu_count(),
                     **common)
            _start_reaper()
            return True
        _match_token_auth()
        try:
            ray.init(address=ray_address, **common)
        except ConnectionError as exc:       # e.g. a token-auth head joined without the token: one clear line
            raise PoolError(f"cannot join the Ray cluster at {ray_address!r}: {str(exc).strip()[:300]} "
                            f"(if the head uses token auth, set RAY_AUTH_TOKEN or ~/.ray/auth_token as on the "
                            f"head)") from None
    return True


@contextlib.contextmanager
def _sigterm_kept():
    """A SIGTERM handler this process set in Python (`colibri serve`'s drain) stays after ray.init, which
    replaces it with its own (exit 15, with a C++ stack dump from the core worker's failure handler)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if callable(previous):
            signal.signal(signal.SIGTERM, previous)


_REAPERS = []


def load_factor():
    """>= 1: how much longer than on an idle machine a Ray start-up may take (1-minute load per core)."""
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


def _start_reaper():
    """A watchdog that ends this Ray's processes when this driver dies, even by SIGKILL (reaper.py)."""
    from . import reaper
    try:
        session = ray._private.worker._global_node.get_session_dir_path()
        _REAPERS.append(reaper.start(session))
    except Exception:           # best effort: Ray's own fate sharing still ends GCS and raylet
        pass


def disconnect():
    """Leave Ray if connected (the bench moves from a local Ray to a simulated cluster)."""
    if ray.is_initialized():
        ray.shutdown()


def _match_token_auth():
    """Use token auth when joining if a Ray token exists, the rule `ray start --head` applied.

    Ray 2.60 heads enable token auth when ~/.ray/auth_token (or RAY_AUTH_TOKEN[_PATH])
    exists and RAY_AUTH_MODE is unset, but a driver joining by address does not;
    without this it is refused with InvalidAuthToken."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available)
    except ImportError:  # other Ray versions: nothing to match
        return
    quiet = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # it warns "token authentication is enabled" on every join
    try:
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    finally:
        quiet.setLevel(level)


def numa_slots(workers, required=True, prefix=""):
    """One (resources, numa node) per worker from the cluster's <prefix>numa_<i> custom resources
    (prefix "" for expert workers, "runner_" for sequence runners), or None.

    Too few slots: InvalidArgument, or None when required=False."""
    totals = ray.cluster_resources()
    keys = sorted((k for k in totals if k.startswith(prefix) and _NUMA_KEY.fullmatch(k[len(prefix):])),
                  key=lambda k: int(k[len(prefix) + 5:]))
    if not keys:
        return None
    slots = []
    for level in range(int(max(totals[k] for k in keys))):  # interleave nodes: numa_0, numa_1, numa_0, ...
        slots += [k for k in keys if totals[k] > level]
    if workers > len(slots):
        if not required:
            return None
        what = "runners" if prefix else "pool.workers"
        raise InvalidArgument(f"{what}={workers} but the cluster offers only {len(slots)} {prefix}numa slots "
                              f"({', '.join(f'{k}={int(totals[k])}' for k in keys)})")
    return [({k: 1}, int(_NUMA_KEY.fullmatch(k[len(prefix):]).group(1))) for k in slots[:workers]]


def slot_count(prefix=""):
    """How many <prefix>numa_<i> slots the cluster offers in all (0 without any)."""
    totals = ray.cluster_resources()
    return int(sum(v for k, v in totals.items() if k.startswith(prefix) and _NUMA_KEY.fullmatch(k[len(prefix):])))


def resolve_placement(cfg):
    """PoolConfig with threads_per_worker and worker_resources made concrete for this cluster."""
    changes = {}
    if cfg.threads_per_worker is None:
        changes["threads_per_worker"] = max(1, (os.cpu_count() or 1) // cfg.workers)
    wr = cfg.worker_resources
    if wr == "auto":  # numa slots when the cluster registered enough of them
        wr = "numa" if numa_slots(cfg.workers, required=False) else None
        changes["worker_resources"] = wr
    if wr == "numa":
        slots = numa_slots(cfg.workers)
        changes["worker_resources"] = [s[0] for s in slots] if slots else None
        changes["worker_numa_nodes"] = tuple(s[1] for s in slots) if slots else None
    return cfg.replace(**changes) if changes else cfg
