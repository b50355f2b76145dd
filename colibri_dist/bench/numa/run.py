"""`python -m colibri_dist.bench numa [--quick] [--json PATH]` (also `colibri numa bench`).

Role: the NUMA experiments (docs/NUMA.md). For every worker of this machine's
plan (one per node with CPUs), and for each memory placement x thread placement:
  memory  default     no policy: pages land where the (pinned or not) thread first touches them
          local       mbind to the worker's node
          remote      mbind to the farthest other node with memory          (needs two nodes)
          interleave  mbind interleaved over every node with memory         (needs two nodes)
  threads unpinned    the process may run on every CPU it is allowed
          pinned      the process pinned to the worker's planned CPUs, and each measuring
                      thread to one of them (thread k -> cpus[k], as the native engine does)
it measures
  read_gib_s    buffer read bandwidth: the buffer is split over one Python thread per worker
                CPU, each summing its slice as uint64 (numpy releases the GIL); when pinned,
                thread k is pinned to cpus[k] (cb_pin_thread); best of repeats
  ffn_tokens_s  expert SwiGLU FFN throughput: one int8 expert whose blob lives in the
                placed buffer, Runtime(threads, cpus if pinned).expert_forward on a batch
Each measurement runs in its own forked child so affinity and policies never leak.
Ratios are against the baseline row of the same worker measured in the same run:
memory=default, threads=unpinned. On a one-node machine the rows that need two
nodes are reported with status "skipped" and the reason.
"""
import argparse
import itertools
import json
import multiprocessing
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ... import numa
from ...numa.plan import memory_nodes_for
from .config import MEMORY, THREADS, load_experiment

BASELINE = {"memory": "default", "threads": "unpinned"}
SIZES = {  # quick / full
    "quick": {"buffer_bytes": 64 << 20, "repeats": 3, "hidden": 256, "inter": 1024, "tokens": 8},
    "full": {"buffer_bytes": 1 << 30, "repeats": 5, "hidden": 2048, "inter": 8192, "tokens": 16},
}


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench numa")
    ap.add_argument("--quick", action="store_true", help="64 MiB buffers, a small expert, 3 repeats")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the results JSON here")
    ap.add_argument("--buffer-mib", type=int, default=None, help="override the buffer size")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--config", default=None, metavar="FILE",
                    help="experiment YAML (configs/numa-experiment.yaml): numa_bench and pool sections")
    return ap.parse_args(argv)


def params(args):
    """Run parameters: quick/full sizes, then the experiment file, then command-line overrides."""
    p = dict(SIZES["quick" if args.quick else "full"], memory=list(MEMORY), threads=list(THREADS),
             workers_per_node=1)
    if args.config:
        overrides, p["workers_per_node"] = load_experiment(args.config)
        p.update({k: v for k, v in overrides.items() if k != "expert"}, **overrides.get("expert", {}))
    if args.buffer_mib:
        p["buffer_bytes"] = args.buffer_mib << 20
    if args.repeats:
        p["repeats"] = args.repeats
    if "default" not in p["memory"] or "unpinned" not in p["threads"]:
        p["memory"] = ["default"] + [m for m in p["memory"] if m != "default"]
        p["threads"] = ["unpinned"] + [t for t in p["threads"] if t != "unpinned"]  # the baseline always runs
    return p


def placement(topo, worker, memory):
    """(policy, nodes) for a memory placement, or (None, reason) when this machine cannot do it."""
    mem_nodes = [n.id for n in topo.memory_nodes]
    if memory == "default":
        return "none", ()
    if memory == "local":
        return "bind", memory_nodes_for(topo, worker.node, "bind")
    if len(mem_nodes) < 2:
        return None, "needs two NUMA nodes with memory (this machine has one)"
    if memory == "interleave":
        return "interleave", tuple(mem_nodes)
    local = set(memory_nodes_for(topo, worker.node, "bind"))
    others = [m for m in mem_nodes if m not in local]
    return "bind", (max(others, key=lambda m: (topo.distance(worker.node, m), -m)),)


# -- measurements (run inside a forked child) -------------------------------------

def _buffer_placement(array):
    """(policy string, {node: pages}) of the mapping holding `array`, from /proc/self/numa_maps."""
    fields = (numa.numa_maps_entry(array.ctypes.data) or "").split()
    pages = {f.split("=")[0][1:]: int(f.split("=")[1]) for f in fields if f[:1] == "N" and "=" in f}
    return (fields[1] if len(fields) > 1 else None), pages


def _pin_each_thread(cpus):
    """ThreadPoolExecutor initializer: the k-th thread started pins itself to cpus[k] (native cb_pin_thread)."""
    counter = itertools.count()

    def init():
        from ...native import numa as native_numa
        native_numa.pin_thread([cpus[next(counter) % len(cpus)]])
    return init


def _read_bandwidth(buf, cpus, pinned, repeats):
    words = buf.view(np.uint64)
    slices = np.array_split(words, len(cpus))
    best = float("inf")
    init = _pin_each_thread(cpus) if pinned else None
    with ThreadPoolExecutor(len(cpus), initializer=init) as pool:
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(np.sum, slices))
            best = min(best, time.perf_counter() - t0)
    return buf.nbytes / best / 2**30


def _ffn_throughput(policy, nodes, cpus, pinned, p):
    """Tokens/s of one int8 expert whose weights sit in a placed buffer; None + reason if unavailable."""
    try:
        from ...format.quantize import pack_expert
        from ...native import Runtime, expert_view
    except ImportError as exc:
        return None, f"native kernels unavailable ({exc})"
    rng = np.random.default_rng(0)
    h, i = p["hidden"], p["inter"]
    blob, layout = pack_expert(rng.standard_normal((i, h), dtype=np.float32) * 0.05,
                               rng.standard_normal((i, h), dtype=np.float32) * 0.05,
                               rng.standard_normal((h, i), dtype=np.float32) * 0.05, "int8")
    placed = numa.alloc_buffer(blob.nbytes, policy, nodes)
    placed[:] = blob
    x = rng.standard_normal((p["tokens"], h), dtype=np.float32)
    with Runtime(threads=len(cpus), cpus=list(cpus) if pinned else None) as rt:
        view = expert_view(placed, layout)
        rt.expert_forward(x, view)  # warm-up
        best = float("inf")
        for _ in range(p["repeats"]):
            t0 = time.perf_counter()
            rt.expert_forward(x, view)
            best = min(best, time.perf_counter() - t0)
    return p["tokens"] / best, None


def measure(worker, memory, threads, policy, nodes, p, allowed):
    """One row, in the calling (child) process."""
    cpus = tuple(worker.cpus) if threads == "pinned" else tuple(allowed)
    numa.pin_process(cpus)
    buf = numa.alloc_buffer(p["buffer_bytes"], "none")
    bound = policy == "none" or numa.bind_buffer(buf, policy, nodes)
    if not bound:
        return {"status": "failed", "reason": f"mbind {policy} {list(nodes)} failed; see warning"}
    buf[:] = 1  # first touch after binding
    policy_shown, pages = _buffer_placement(buf)
    row = {"status": "ok", "reason": None, "cpus_allowed_list": numa.read_status()["cpus_allowed_list"],
           "buffer_policy": policy_shown, "buffer_pages_per_node": pages,
           "read_gib_s": _read_bandwidth(buf, worker.cpus, threads == "pinned", p["repeats"])}
    try:
        row["ffn_tokens_s"], row["ffn_note"] = _ffn_throughput(policy, nodes, worker.cpus, threads == "pinned", p)
    except Exception as exc:  # the bandwidth row stays valid; say why the FFN did not run
        row["ffn_tokens_s"], row["ffn_note"] = None, f"{type(exc).__name__}: {exc}"
    return row


def _child(conn, *args):
    try:
        conn.send(measure(*args))
    except BaseException as exc:
        conn.send({"status": "failed", "reason": f"{type(exc).__name__}: {exc}"})
    conn.close()


def run_in_child(*args):
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child, *args))
    proc.start()
    row = parent.recv() if parent.poll(600) else {"status": "failed", "reason": "child timed out"}
    proc.join(10)
    if proc.is_alive():
        proc.kill()
    return row


# -- driver --------------------------------------------------------------------------

def run(p):
    topo = numa.topology()
    plan = numa.plan(topo, workers_per_node=p["workers_per_node"], mem_policy="none")
    allowed = sorted(os.sched_getaffinity(0))
    rows, skipped = [], []
    for worker in plan.workers:
        for memory in p["memory"]:
            policy, nodes_or_reason = placement(topo, worker, memory)
            for threads in p["threads"]:
                base = {"worker": worker.index, "node": worker.node, "memory": memory, "threads": threads,
                        "cpus": list(worker.cpus if threads == "pinned" else allowed)}
                if policy is None:
                    rows.append({**base, "mem_policy": None, "mem_nodes": [], "status": "skipped",
                                 "reason": nodes_or_reason})
                    skipped.append(f"worker {worker.index}: memory={memory} threads={threads}: {nodes_or_reason}")
                    continue
                row = run_in_child(worker, memory, threads, policy, nodes_or_reason, p, allowed)
                rows.append({**base, "mem_policy": policy, "mem_nodes": list(nodes_or_reason), **row})
    _add_ratios(rows)
    return {"bench": "numa", "version": 1, "params": p, "baseline": BASELINE,
            "host": {"machine": platform.machine(), "cpus_allowed": numa.format_cpulist(allowed),
                     "simd": _simd(), "loadavg_1m": os.getloadavg()[0]},
            "topology": topo.to_dict(), "plan": [w.to_dict() for w in plan.workers],
            "rows": rows, "skipped": skipped}


def _simd():
    try:
        from ...native import simd_name
        return simd_name()
    except Exception:
        return None


def _add_ratios(rows):
    for row in rows:
        base = next((r for r in rows if r["worker"] == row["worker"] and r["memory"] == BASELINE["memory"]
                     and r["threads"] == BASELINE["threads"] and r.get("status") == "ok"), None)
        for key, ratio in (("read_gib_s", "read_ratio"), ("ffn_tokens_s", "ffn_ratio")):
            ok = base is not None and row.get(key) and base.get(key)
            row[ratio] = row[key] / base[key] if ok else None


def render(result):
    lines = [f"{'worker':>6} {'node':>4} {'memory':<10} {'threads':<8} {'mem nodes':<9} {'read GiB/s':>10} "
             f"{'x base':>6} {'FFN tok/s':>10} {'x base':>6}  note"]
    for r in result["rows"]:
        fmt = lambda v, f: (f % v) if v is not None else "-"  # noqa: E731
        note = r.get("reason") or r.get("ffn_note") or ""
        lines.append(f"{r['worker']:>6} {r['node']:>4} {r['memory']:<10} {r['threads']:<8} "
                     f"{','.join(map(str, r['mem_nodes'])) or '-':<9} {fmt(r.get('read_gib_s'), '%.2f'):>10} "
                     f"{fmt(r.get('read_ratio'), '%.2f'):>6} {fmt(r.get('ffn_tokens_s'), '%.0f'):>10} "
                     f"{fmt(r.get('ffn_ratio'), '%.2f'):>6}  {note}")
    lines.append(f"baseline: memory={BASELINE['memory']}, threads={BASELINE['threads']} of the same worker")
    return "\n".join(lines)


def main(argv=None):
    args = _args(sys.argv[1:] if argv is None else argv)
    p = params(args)
    if not hasattr(os, "sched_getaffinity"):
        print("numa bench: needs Linux (sched_getaffinity)", file=sys.stderr)
        return 1
    result = run(p)
    print(render(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.json}")
    return 0 if all(r["status"] != "failed" for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
