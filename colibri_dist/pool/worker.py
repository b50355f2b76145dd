"""ExpertWorker: a thin shell over one MoeExecutor, living in its own Ray actor process.

Role in the data flow: receives one request per micro-batch from the Router
(the layer batch x by object reference, read zero-copy from the object store,
+ per-expert row lists + maybe a shared-expert token range), runs
engine.expert_forward / engine.shared_forward, and returns the expert rows
concatenated in request order. It pins itself to its CPUs / NUMA
node through colibri_dist.numa when a topology is available.

Hot-added experts are persisted beside the model by the Router's engine (a
versioned manifest); each request names the table version it was routed with
and a worker behind it refreshes before computing. A restarted actor opens the
model afresh and so starts on the current table.
"""
import os
import time
import warnings

import numpy as np


def _numa_pin(index, n_workers, numa, node_hint=None):
    """Apply the NUMA plan for this worker; returns (report dict or None, cpus or None)."""
    if not numa or not numa.get("enabled", True):
        return None, None
    try:
        from .. import numa as numa_room
        topo = numa_room.topology(numa.get("sysfs_root"))
        n_nodes = max(1, len(topo.cpu_nodes))
        per_node = max(int(numa.get("workers_per_node", 1)), -(-n_workers // n_nodes))
        mem = numa.get("mem_policy", "bind")
        plan = numa_room.plan(topo, workers_per_node=per_node, mem_policy=mem)
        candidates = [w for w in plan.workers if node_hint is None or w.node == node_hint] or list(plan.workers)
        with warnings.catch_warnings(record=True) as caught:  # reported in stats, not printed per worker
            warnings.simplefilter("always")
            report = numa_room.apply(candidates[index % len(candidates)], read_numa_maps=False)
        report["warnings"] = [str(w.message) for w in caught]
    except Exception as exc:  # pinning decides speed, never results: run unpinned
        return {"mode": "unpinned", "error": f"{type(exc).__name__}: {exc}"}, None
    cpus = report["requested"]["cpus"] if report["mode"] == "numa" else report["cpus"]
    return report, (list(cpus) or None)


class ExpertWorker:
    """Plain class; pool/actors.py wraps it as a Ray actor."""

    def __init__(self, path, index, cfg):
        """cfg: the pool's PoolConfig (pool/config.py), the same object the Router got."""
        from ..moe_executor import MoeExecutor
        self.index, self.path = int(index), str(path)
        threads = cfg.threads_per_worker
        self.numa_report, cpus = _numa_pin(self.index, cfg.workers, cfg.numa, cfg.worker_numa_node_of(self.index))
        if cpus is not None and threads:
            cpus = cpus[:int(threads)] if len(cpus) >= int(threads) else None
        offload_dir = cfg.offload_dir
        if offload_dir:
            offload_dir = os.path.join(offload_dir, f"worker-{self.index}")
            os.makedirs(offload_dir, exist_ok=True)
        self.executor = MoeExecutor(path, threads=threads, cache_bytes=cfg.cache_bytes, offload_dir=offload_dir,
                             policy=cfg.policy, cpus=cpus, compression=cfg.compression, w8a8=cfg.w8a8,
                             source_delay_s=cfg.hooks.source_delay_s)
        self.cpus = cpus
        self.requests = 0
        self.rows = 0
        self.delay_s = cfg.hooks.worker_delay_s  # test hook: widens the window for killing a worker mid-batch
        self.sim = (cfg.hooks.simulate_call_s, cfg.hooks.simulate_row_s)
        self.started = time.time()

    def ping(self):
        import ray
        return {"index": self.index, "pid": os.getpid(), "version": self.table_version(), "started": self.started,
                "node": ray.get_runtime_context().get_node_id()}

    def table_version(self):
        return int(self.executor.segments.version)

    def refresh(self):
        """See experts the Router added or removed (persisted beside the model); returns the version."""
        self.executor.refresh()
        return self.table_version()

    def run(self, x, req):
        """One worker batch on the layer batch x (read-only, shared through the object store):
        {"out": rows of every expert in request order, "shared": the shared expert's range or None}."""
        if req["version"] > self.table_version():
            self.refresh()  # expert data is immutable, so an older table's request runs as is
            if req["version"] > self.table_version():
                return {"stale": self.table_version(), "pid": os.getpid()}
        if self.delay_s:
            time.sleep(self.delay_s)
        started = time.perf_counter()
        if any(self.sim):
            return self._simulate(x, req, started)
        layer = req["layer"]
        outs = self.executor.experts_forward(layer, x, req["experts"])
        out = np.concatenate(outs) if outs else np.zeros((0, x.shape[1]), np.float32)
        shared = None
        if req["shared"] is not None:
            start, stop = req["shared"]
            shared = self.executor.shared_forward(layer, x[start:stop])
        self.requests += 1
        self.rows += len(out)
        return {"out": out, "shared": shared, "pid": os.getpid(), "busy_s": time.perf_counter() - started}

    def _simulate(self, x, req, started):
        """Calibrated delay instead of compute (bench pool --sim): zeros of the right shapes."""
        rows = sum(len(r) for _, r in req["experts"])
        span = req["shared"]
        n_shared = 0 if span is None else span[1] - span[0]
        time.sleep(self.sim[0] + (rows + n_shared) * self.sim[1])
        self.requests += 1
        self.rows += rows
        h = x.shape[1]
        return {"out": np.zeros((rows, h), np.float32), "pid": os.getpid(),
                "shared": None if span is None else np.zeros((n_shared, h), np.float32),
                "busy_s": time.perf_counter() - started}

    def stats(self):
        import ray
        return {"index": self.index, "pid": os.getpid(), "cpus": self.cpus, "version": self.table_version(),
                "node": ray.get_runtime_context().get_node_id(),
                "requests": self.requests, "rows": self.rows, "numa": self.numa_report,
                "engine": self.executor.stats()}

    def close(self):
        self.executor.close()
        return True
