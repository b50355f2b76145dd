"""Scale simulation: several raylets on loopback, expert workers whose compute is a calibrated delay.

Role: `bench pool --sim` asks what the pool's design does with more machines than this box has.
`simulate(path, workers=W, runners=R, ...)` starts (or reuses) a ray.cluster_utils.Cluster with
`raylets` worker raylets, places W ExpertWorkers and R simulated sequence runners round-robin on
them by custom resources, and runs the generation workload's MoE traffic: every runner, with its
own ExpertClient (routing + balancing + dispatch + combine, the real code), steps `steps` decode
steps of `batch` sequences through `layers` MoE layers. Workers sleep call_s + rows x row_s instead
of computing (PoolHooks.simulate_*), so they cost no CPU and W of them behave like W machines'
sockets; dense compute in the runners is left out (it scales with the runners, i.e. machines).
Returns aggregate tokens/s; scaling efficiency = tok/s(W) / (W x tok/s(1)).
"""
import time

import numpy as np
import ray

from ..pool.config import PoolConfig, PoolHooks
from .cluster import FAST_FAILURE_DETECTION, LOOPBACK


class SimRunner:
    """A sequence runner reduced to its MoE traffic (real ExpertClient, no dense compute)."""

    def __init__(self, path, cfg, workers, info, seed):
        from ..moe_executor import MoeExecutor
        from ..pool.client import ExpertClient
        self.executor = MoeExecutor(path, threads=1)
        self.client = ExpertClient(self.executor, workers, cfg, info)
        self.rng = np.random.default_rng(seed)

    def warm(self, batch, layers):
        h = self.executor.model.config.hidden
        self.moe = list(self.executor.model.moe_layers)
        self.xs = [self.rng.standard_normal((batch, h)).astype(np.float32) for _ in range(layers)]
        self.client.moe_forward(self.moe[0], self.xs[0])
        return True

    def run(self, steps, batch, layers):
        moe, xs = self.moe, self.xs
        t = time.perf_counter()
        for _ in range(steps):
            for j in range(layers):
                self.client.moe_forward(moe[j % len(moe)], xs[j])
        c = self.client.counters()
        return {"seconds": time.perf_counter() - t, "tokens": steps * batch, "calls": c["batches"],
                "timing": c["timing"], "busy_s": c["busy_s"], "rows": c["tokens"]}


SimRunnerActor = ray.remote(SimRunner)


class SimCluster:
    """A head raylet (driver, Router) + `raylets` raylets offering sim_<j> slots for workers and runners."""

    def __init__(self, raylets=4, slots=16):
        from ray.cluster_utils import Cluster
        self.cluster = Cluster(initialize_head=True, head_node_args=dict(
            num_cpus=1, node_ip_address=LOOPBACK, include_dashboard=False, _system_config=FAST_FAILURE_DETECTION))
        for j in range(raylets):
            self.cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK, resources={f"sim_{j}": slots})
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, namespace="colibri-sim", logging_level="WARNING", log_to_driver=False)
        self.raylets = raylets

    def place(self, i):
        return {f"sim_{i % self.raylets}": 1}

    def shutdown(self):
        ray.shutdown()
        self.cluster.shutdown()


def simulate(sim, path, workers, runners, steps=10, batch=32, layers=2, call_s=0.0, row_s=1e-4, micro_batch=1024,
             min_request_rows=0):
    """One point of the scaling curve on an existing SimCluster; returns a dict (tok/s and where time went)."""
    from ..pool.facade import Pool
    cfg = PoolConfig(workers=workers, threads_per_worker=1, micro_batch=micro_batch, numa={"enabled": False},
                     min_request_rows=min_request_rows,
                     worker_resources=[sim.place(i) for i in range(workers)],
                     hooks=PoolHooks(simulate_call_s=call_s, simulate_row_s=row_s))
    with Pool(path, cfg) as pool:
        h = ray.get(pool._router.handles.remote())
        actors = [SimRunnerActor.options(num_cpus=0, resources=sim.place(workers + r)).remote(
            path, pool.config, h["workers"], h["info"], r) for r in range(runners)]
        ray.get([a.warm.remote(batch, layers) for a in actors])  # all started before any runs
        t = time.perf_counter()
        outs = ray.get([a.run.remote(steps, batch, layers) for a in actors])
        wall = time.perf_counter() - t
        for a in actors:
            ray.kill(a)
    tokens = sum(o["tokens"] for o in outs)
    slowest = max(o["seconds"] for o in outs)
    busy = [sum(v) for v in zip(*(o["busy_s"] for o in outs))]
    rows = [sum(v) for v in zip(*(o["rows"] for o in outs))]
    timing = {k: sum(o["timing"][k] for o in outs) / runners for k in outs[0]["timing"]}
    return {"workers": workers, "runners": runners, "tokens": tokens, "seconds": slowest, "wall_s": wall,
            "tok_s": tokens / slowest, "layer_calls": sum(o["calls"] for o in outs),
            "worker_busy_s": busy, "worker_rows": rows, "runner_timing_s": timing}
