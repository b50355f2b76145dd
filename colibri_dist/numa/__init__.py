"""NUMA placement: topology from sysfs -> per-worker plan -> pinning and memory binding.

    topo = numa.topology(sysfs_root=None)
    plan = numa.plan(topo, workers_per_node=1, mem_policy="bind")
    applied = numa.apply(plan.workers[i])          # inside worker i; dict for pool.stats()
    ok = numa.bind_buffer(array, policy, nodes)    # store cache buffers
"""
from .apply import (NumaFallbackWarning, alloc_buffer, apply, bind_buffer, numa_maps_entry,
                    numa_maps_summary, pin_process, read_status, round_robin_cpus, stats)
from .plan import MEM_POLICIES, Plan, WorkerPlan, plan
from .topology import Node, Topology, format_cpulist, parse_cpulist, topology

__all__ = ["topology", "plan", "apply", "bind_buffer", "alloc_buffer", "stats", "read_status",
           "numa_maps_summary", "numa_maps_entry", "pin_process", "round_robin_cpus", "NumaFallbackWarning",
           "Node", "Topology", "Plan", "WorkerPlan", "MEM_POLICIES", "format_cpulist", "parse_cpulist"]
