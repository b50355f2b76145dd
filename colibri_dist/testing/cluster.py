"""Ray set-up for stress runs and tests: a local Ray with worker hooks, or several raylets on one machine.

Role in the data flow: the stress harness (stress/, which may not import
ray) calls `start(...)` before it builds its Pool. Ray is then already
initialised, so Pool(ray_address=None) joins it instead of starting its own.
Everything binds to 127.0.0.1.

  nodes == 1   ray.init on loopback with a runtime_env (env vars + a worker
               process setup hook, e.g. the stress fault hooks)
  nodes  > 1   ray.cluster_utils.Cluster: a head raylet (driver, router; no
               worker slot) and `nodes - 1` worker raylets, each offering one
               WORKER_RESOURCE slot. Pool workers ask for that resource, so
               they spread over the worker raylets and a worker whose raylet
               is removed restarts on another one with a free slot.
"""
import logging
import os

# Keep every address on loopback: with this unset, Ray resolves "127.0.0.1" in a cluster
# address to the host's network IP. Ray reads it when it is first imported...
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray  # noqa: E402

from ..pool.ray_setup import NAMESPACE

WORKER_RESOURCE = "colibri_stress_worker"
LOOPBACK = "127.0.0.1"
# notice a removed raylet within ~1.5 s (defaults take tens of seconds) so its actors restart soon
FAST_FAILURE_DETECTION = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                          "health_check_failure_threshold": 3}


def _runtime_env(env, setup_hook):
    rt = {}
    if env:
        rt["env_vars"] = {k: str(v) for k, v in env.items()}
    if setup_hook:
        rt["worker_process_setup_hook"] = setup_hook
    return rt or None


class LocalRay:
    """One local Ray (nodes == 1)."""
    cluster = None

    def __init__(self, num_cpus=None, env=None, setup_hook=None):
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        ray.init(address="local", _node_ip_address=LOOPBACK, num_cpus=num_cpus or os.cpu_count(),
                 include_dashboard=False, logging_level=logging.WARNING, namespace=NAMESPACE,
                 log_to_driver=False, runtime_env=_runtime_env(env, setup_hook))

    def worker_resources(self, workers):
        return None

    def shutdown(self):
        ray.shutdown()


class MultiRaylet:
    """A head raylet plus worker raylets on this machine (ray.cluster_utils.Cluster)."""

    def __init__(self, nodes, cpus_per_node=2, env=None, setup_hook=None, object_store_bytes=80 << 20):
        from ray.cluster_utils import Cluster
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        self.cpus = int(cpus_per_node)
        self.store_bytes = int(object_store_bytes)
        self.cluster = Cluster(initialize_head=True, head_node_args=self._node_args(head=True))
        self._added = 0
        for _ in range(int(nodes) - 1):
            self.add_node()
        ray.init(address=self.cluster.address, _node_ip_address=LOOPBACK, namespace=NAMESPACE,
                 logging_level=logging.WARNING, log_to_driver=False,
                 runtime_env=_runtime_env(env, setup_hook))
        self.cluster.wait_for_nodes()

    def _node_args(self, head=False):
        args = dict(num_cpus=self.cpus, node_ip_address=LOOPBACK, object_store_memory=self.store_bytes)
        if head:
            args.update(include_dashboard=False, _system_config=FAST_FAILURE_DETECTION)
        else:
            args.update(resources={WORKER_RESOURCE: 1})
        return args

    def add_node(self):
        """Start one more worker raylet; True when it joined."""
        self.cluster.add_node(**self._node_args())
        self._added += 1
        return True

    def worker_resources(self, workers):
        return [{WORKER_RESOURCE: 1} for _ in range(workers)]

    def raylet_pids(self):
        """{raylet pid: node} of every worker raylet."""
        out = {}
        for node in list(self.cluster.worker_nodes):
            for info in node.all_processes.get("raylet", []):
                out[info.process.pid] = node
        return out

    def node_of(self, worker_pid):
        """The worker raylet node whose raylet spawned worker_pid, or None."""
        ppid = _ppid(worker_pid)
        return self.raylet_pids().get(ppid)

    def protected_nodes(self):
        """Worker raylets that must stay: the driver's, and any running the pool's Router actor
        (Ray titles actor processes `ray::<Class>`; the Router is not restartable)."""
        keep = set()
        driver = ray._private.worker.global_worker.node
        for raylet_pid, node in self.raylet_pids().items():
            if driver is not None and node._raylet_socket_name == driver._raylet_socket_name:
                keep.add(id(node))
            elif any(_cmdline(child).startswith("ray::Router") for child in _children(raylet_pid)):
                keep.add(id(node))
        return keep

    def remove_worker_node(self, worker_pids, seq=0):
        """Remove the raylet hosting one of worker_pids (chosen by seq), never a protected one;
        a dict describing it, or None when there is no such raylet."""
        hosts, keep = {}, self.protected_nodes()
        for pid in sorted(worker_pids):
            node = self.node_of(pid)
            if node is not None and id(node) not in keep:
                hosts.setdefault(id(node), (node, []))[1].append(pid)
        if not hosts:
            return None
        node, pids = list(hosts.values())[seq % len(hosts)]
        self.cluster.remove_node(node, allow_graceful=False)
        return {"node_id": getattr(node, "node_id", None), "pids": pids,
                "worker_nodes_left": len(self.cluster.worker_nodes)}

    def shutdown(self):
        ray.shutdown()
        self.cluster.shutdown()


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("PPid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _loopback_only():
    """...so if ray was imported before this module, apply the same switch to its constant."""
    from ray._private import ray_constants
    if os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0") == "0":
        ray_constants.ENABLE_RAY_CLUSTER = False


def start(nodes=1, cpus_per_node=None, env=None, setup_hook=None):
    """LocalRay (nodes == 1) or MultiRaylet (nodes > 1); raises if Ray is already initialised here."""
    if ray.is_initialized():
        raise RuntimeError("Ray is already initialised in this process; the stress run needs its own")
    _loopback_only()
    if int(nodes) <= 1:
        return LocalRay(num_cpus=cpus_per_node, env=env, setup_hook=setup_hook)
    return MultiRaylet(nodes, cpus_per_node=cpus_per_node or 2, env=env, setup_hook=setup_hook)
