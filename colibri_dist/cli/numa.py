"""`colibri numa plan|bench`: show the NUMA plan of a machine (or a sysfs copy) and run the NUMA experiments.

Role: CLI shell over colibri_dist.numa (plan) and colibri_dist.bench.numa (bench).
`plan --json` prints the plan JSON documented in docs/NUMA.md; without --json a table.
"""
import json
import sys

from .. import numa


def register(subparsers):
    parser = subparsers.add_parser("numa", help="NUMA topology, worker plan and experiments")
    sub = parser.add_subparsers(dest="numa_command", metavar="{plan,bench}")
    sub.required = True

    p = sub.add_parser("plan", help="print the per-worker NUMA plan for this machine or a sysfs tree")
    p.add_argument("--sysfs-root", default=None, metavar="DIR",
                   help="read the topology from DIR (a copy of /sys) instead of this machine")
    p.add_argument("--workers-per-node", type=int, default=1, metavar="N")
    p.add_argument("--mem-policy", choices=numa.MEM_POLICIES, default="bind")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run_plan)

    b = sub.add_parser("bench", help="buffer bandwidth / expert FFN throughput: local, remote, interleaved, pinned")
    b.add_argument("--quick", action="store_true", help="small buffers and few repeats (seconds)")
    b.add_argument("--json", dest="json_path", default=None, metavar="PATH", help="write the results JSON here")
    b.add_argument("--config", default=None, metavar="FILE", help="experiment YAML (configs/numa-experiment.yaml)")
    b.set_defaults(func=run_bench)


def _format_gib(nbytes):
    return f"{nbytes / 2**30:.1f} GiB" if nbytes else "-"


def render_plan(plan_obj):
    """Human-readable plan: nodes, distance matrix, workers."""
    topo, lines = plan_obj.topology, []
    lines.append(f"topology: {len(topo.nodes)} node(s) from {topo.sysfs_root or topo.source}"
                 + (f"; offline CPUs {numa.format_cpulist(topo.offline_cpus)}" if topo.offline_cpus else ""))
    lines.append(f"{'node':>4}  {'cpus':<24} {'cores':>5}  {'memory':>10}")
    for n in topo.nodes:
        cores = len(topo.cores(n.cpus)) if n.cpus else 0
        lines.append(f"{n.id:>4}  {numa.format_cpulist(n.cpus) or '(memory only)':<24} {cores:>5}  "
                     f"{_format_gib(n.mem_bytes):>10}")
    lines.append("distances:")
    lines.append("      " + "".join(f"{n.id:>5}" for n in topo.nodes))
    for n, row in zip(topo.nodes, topo.distances):
        lines.append(f"{n.id:>5} " + "".join(f"{d:>5}" for d in row))
    lines.append(f"workers ({plan_obj.workers_per_node} per CPU node, mem policy {plan_obj.mem_policy}):")
    lines.append(f"{'worker':>6}  {'node':>4}  {'cpus':<24} {'cores':>5}  {'mem policy':<10} {'mem nodes'}")
    for w in plan_obj.workers:
        lines.append(f"{w.index:>6}  {w.node:>4}  {numa.format_cpulist(w.cpus):<24} {w.physical_cores:>5}  "
                     f"{w.mem_policy:<10} {','.join(map(str, w.mem_nodes)) or '-'}")
    return "\n".join(lines)


def run_plan(args):
    topo = numa.topology(args.sysfs_root)
    plan_obj = numa.plan(topo, workers_per_node=args.workers_per_node, mem_policy=args.mem_policy)
    if args.json:
        json.dump(plan_obj.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_plan(plan_obj))
    return 0


def run_bench(args):
    from ..bench import numa as bench_numa
    argv = ((["--quick"] if args.quick else []) + (["--json", args.json_path] if args.json_path else [])
            + (["--config", args.config] if args.config else []))
    return bench_numa.main(argv)
