"""Worker placement plan: which node, which CPUs and which memory policy per worker.

Role: topology -> plan. The pool starts one worker per WorkerPlan and each
worker calls numa.apply(plan.workers[i]) on itself. Rules:
  * `workers_per_node` workers on every node that has CPUs; none on memory-only nodes.
  * A node's physical cores are split into contiguous, near-equal chunks, one per
    worker, each worker getting every online SMT thread of its cores. Only when a
    node has more workers than cores are cores' threads split between workers.
  * Within a worker, `cpus` is in use order: one thread of each physical core
    first, then the SMT siblings, so N native threads land on N distinct cores.
  * mem_policy "bind": the worker's node, or when that node has no memory the
    nearest node(s) with memory; "preferred": the first of those (allocation falls
    back to other nodes when it is full); "interleave": every node with memory; "none": ().
"""
from dataclasses import dataclass

from ..errors import InvalidArgument
from .topology import format_cpulist

MEM_POLICIES = ("bind", "interleave", "preferred", "none")


@dataclass(frozen=True)
class WorkerPlan:
    index: int            # 0..n_workers-1, the pool's worker rank
    n_workers: int        # workers in the whole plan (for the round-robin fallback)
    node: int             # NUMA node the worker runs on
    cpus: tuple           # CPUs in use order (primary threads first, then SMT siblings)
    physical_cores: int   # distinct physical cores among cpus
    mem_policy: str       # bind | interleave | preferred | none
    mem_nodes: tuple      # nodes the memory policy names (() for none)
    n_mem_nodes: int      # nodes with memory on the planned machine (binding makes no sense below 2)

    def to_dict(self):
        return {"index": self.index, "node": self.node, "cpus": list(self.cpus),
                "cpulist": format_cpulist(self.cpus), "physical_cores": self.physical_cores,
                "mem_policy": self.mem_policy, "mem_nodes": list(self.mem_nodes)}


@dataclass(frozen=True)
class Plan:
    topology: object      # numa.topology.Topology
    workers: tuple        # WorkerPlan, ordered by node then index
    workers_per_node: int
    mem_policy: str

    def to_dict(self):
        topo = self.topology.to_dict()
        return {"workers_per_node": self.workers_per_node, "mem_policy": self.mem_policy,
                "source": topo["source"], "sysfs_root": topo["sysfs_root"],
                "nodes": topo["nodes"], "distances": topo["distances"],
                "offline_cpus": topo["offline_cpus"], "smt_groups": topo["smt_groups"],
                "workers": [w.to_dict() for w in self.workers]}


def _chunks(items, n):
    """Split `items` into n contiguous chunks whose sizes differ by at most one."""
    base, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        size = base + (1 if i < extra else 0)
        out.append(items[start:start + size])
        start += size
    return out


def _use_order(cores):
    """Threads of these cores, first thread of every core first, then the second, ..."""
    depth = max(len(c) for c in cores)
    return tuple(core[level] for level in range(depth) for core in cores if level < len(core))


def split_node_cpus(topo, node, n_workers):
    """CPU tuples (use order) for n_workers workers on `node`, whole cores first."""
    cores = topo.cores(node.cpus)
    threads = [cpu for core in cores for cpu in core]
    if n_workers > len(threads):
        raise InvalidArgument(f"node {node.id} has {len(threads)} online CPUs "
                              f"({format_cpulist(threads)}); cannot plan {n_workers} workers on it")
    if n_workers <= len(cores):
        return [_use_order(chunk) for chunk in _chunks(cores, n_workers)]
    # more workers than cores: split threads, keeping each core's threads adjacent
    return [tuple(chunk) for chunk in _chunks(threads, n_workers)]


def memory_nodes_for(topo, node_id, mem_policy):
    """Nodes the worker's memory policy names."""
    with_memory = [n.id for n in topo.memory_nodes]
    if mem_policy == "none" or not with_memory:
        return ()
    if mem_policy == "interleave":
        return tuple(with_memory)
    if node_id in with_memory:
        return (node_id,)  # bind or preferred
    nearest = min(topo.distance(node_id, m) for m in with_memory)
    nodes = tuple(m for m in with_memory if topo.distance(node_id, m) == nearest)
    return nodes[:1] if mem_policy == "preferred" else nodes


def plan(topo, workers_per_node=1, mem_policy="bind"):
    """Plan `workers_per_node` workers on every node with CPUs."""
    if mem_policy not in MEM_POLICIES:
        raise InvalidArgument(f"mem_policy {mem_policy!r}: expected one of {', '.join(MEM_POLICIES)}")
    if isinstance(workers_per_node, bool) or not isinstance(workers_per_node, int) or workers_per_node < 1:
        raise InvalidArgument(f"workers_per_node must be an integer >= 1, got {workers_per_node!r}")
    nodes = topo.cpu_nodes
    if not nodes:
        raise InvalidArgument("topology has no node with online CPUs; nothing to plan")
    n_total, n_mem = workers_per_node * len(nodes), len(topo.memory_nodes)
    workers = []
    for node in nodes:
        mem_nodes = memory_nodes_for(topo, node.id, mem_policy)
        for cpus in split_node_cpus(topo, node, workers_per_node):
            workers.append(WorkerPlan(len(workers), n_total, node.id, cpus, len(topo.cores(cpus)),
                                      mem_policy, mem_nodes, n_mem))
    return Plan(topo, tuple(workers), workers_per_node, mem_policy)
