"""`colibri bench scale`: colibri against llama.cpp at real size, in RAM and larger than RAM, rerunnable anywhere.

Role: the entry point (main). It builds a random checkpoint with the exact layer shapes of Qwen3-30B-A3B or
DeepSeek-V3 (scale/shapes.py, scale/checkpoint.py: numpy + safetensors, with controlled routing), converts
it (`colibri convert --preset`, inside a 2 GiB memory cgroup when root: its peak is reported) and, with
--llama-bin, to llama.cpp's Q8_0 and Q4_K_M; measures the routing it really has (scale/routing.py); runs
alternated rounds (scale/measure.py) in RAM and under memory limits of a fraction of the container, and
(as root) the pool stage: the model over 2 expert workers each in a memory cgroup of 55% of it (scale/pool.py);
then prints and writes the tables (scale/summary.py, scale/report.py): JSON, markdown and a plot. The scratch
folder (~10 GB per 8 Qwen3 layers in bf16) is deleted at the end unless --keep.
"""
import argparse
import json
import os
import shutil
import sys
import time

from . import checkpoint as ckpt
from . import measure, prepare, shapes
from .limits import available, run_counted


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench scale", description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="qwen3-30b-a3b", choices=list(shapes.SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="decoder layers (default: 8 for Qwen3, 1 for DeepSeek)")
    ap.add_argument("--preset", default="q4_k_m", help="colibri's container preset (colibri convert --preset)")
    ap.add_argument("--llama-bin", default=None, metavar="DIR",
                    help="bin folder of a llama.cpp build (../shared/peers/build-llama-cpp.sh prints it); "
                         "without it only colibri is measured")
    ap.add_argument("--types", default="Q4_K_M", help="llama.cpp types measured (comma-separated)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512, help="prefill length in RAM")
    ap.add_argument("--decode-prompt", type=int, default=64, help="prompt of each decoding sequence")
    ap.add_argument("--gen", type=int, default=32, help="decode steps in RAM")
    ap.add_argument("--parallel", default="1,8,32", help="decoding sequences in RAM")
    ap.add_argument("--profile-steps", type=int, default=16,
                    help="1-sequence decode steps profiled in RAM: Python vs the C core, fused layers vs op by op (0 = no)")
    ap.add_argument("--limits", default="0.4,0.6",
                    help="memory limits as fractions of the container's size ('' = none)")
    ap.add_argument("--limit-extra-mib", type=int, default=0,
                    help="added to every limit (toy shapes: room for the runtime itself)")
    ap.add_argument("--limit-gen", type=int, default=32, help="decode steps under a limit")
    ap.add_argument("--convert-limit-mib", type=int, default=2048, help="memory cgroup around colibri convert")
    ap.add_argument("--pool-workers", type=int, default=None,
                    help="the pool stage: expert workers on a loopback Ray, each in a memory cgroup of --pool-fraction "
                         "of the container (0 = off; default 2 where a cgroup v1 memory group can be made, else off)")
    ap.add_argument("--pool-fraction", type=float, default=0.55,
                    help="each pool worker's memory cgroup as a fraction of the container (plus --limit-extra-mib)")
    ap.add_argument("--pool-parallel", default="1,8", help="greedy decoding sequences of the pool stage")
    ap.add_argument("--pool-warmup", type=int, default=32,
                    help="decode steps of random tokens before the pool stage measures")
    ap.add_argument("--skew", type=float, default=ckpt.DEFAULT_SKEW, help="router popularity skew (checkpoint.py)")
    ap.add_argument("--locality", type=float, default=ckpt.DEFAULT_LOCALITY,
                    help="attention output scale: temporal locality of routing (checkpoint.py)")
    ap.add_argument("--work", default=os.path.join(os.path.expanduser("~"), ".cache", "colibri", "scale"))
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint and converted files")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per measured process")
    ap.add_argument("--bw-mib", type=int, default=1024)
    ap.add_argument("--json", default="bench_scale.json")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--plot", default=None, help="a PNG of the tables")
    args = ap.parse_args(argv)
    args.layers = args.layers or shapes.SHAPES[args.shape][1]
    try:
        args.parallel = [int(p) for p in args.parallel.split(",") if p]
        args.limits = [float(f) for f in args.limits.split(",") if f]
        args.pool_parallel = [int(p) for p in args.pool_parallel.split(",") if p]
    except ValueError as exc:
        ap.error(f"--parallel / --limits / --pool-parallel: {exc}")
    if any(not 0 < f < 1 for f in args.limits):
        ap.error(f"--limits: fractions between 0 and 1, got {args.limits}")
    for flag in ("layers", "rounds", "prompt", "decode_prompt", "gen", "limit_gen", "threads"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')}: must be >= 1")
    args.types = [t for t in args.types.split(",") if t]
    _pool_args(ap, args)
    return args


def _pool_args(ap, args):
    """Checks the pool stage's flags; --pool-workers defaults to 2 where a memory cgroup can be made, else to 0
    with the reason in args.pool_skipped."""
    why = available()
    args.pool_skipped = why if args.pool_workers is None and why else None
    if args.pool_workers is None:
        args.pool_workers = 0 if why else 2
    if args.pool_workers < 0:
        ap.error(f"--pool-workers: must be >= 0, got {args.pool_workers}")
    if args.pool_workers and why:
        ap.error(f"--pool-workers: each worker runs in a memory cgroup, and here {why}")
    if not 0 < args.pool_fraction < 1:
        ap.error(f"--pool-fraction: a fraction between 0 and 1, got {args.pool_fraction}")
    if args.pool_warmup < 0 or not args.pool_parallel or min(args.pool_parallel) < 1:
        ap.error("--pool-warmup / --pool-parallel: steps >= 0 and sequence counts >= 1")


POLICIES = ("lru", "lfu")     # the RAM cache's eviction under a limit: recency alone; frequency (hot experts stay)
RUNTIME_BYTES = 400 << 20    # Python, numpy, the native core, its arenas and a margin (child peak RSS in RAM
                             # minus the weights it maps: ~300 MB at the Qwen3 shape)


def engines(preset, ggufs):
    """{name: what to run} in RAM and under a limit: kind (colibri | llama), the RAM cache and its policy,
    llama.cpp's type and extra flags."""
    ram = {f"colibri {preset}": {"kind": "colibri"}}
    ram.update({f"llama.cpp {t}": {"kind": "llama", "type": t} for t in ggufs})
    limit = {f"colibri {preset} mmap": {"kind": "colibri", "cache": False}}
    limit.update({f"colibri {preset} cache {p}": {"kind": "colibri", "cache": True, "policy": p} for p in POLICIES})
    limit.update({f"llama.cpp {t}{suffix}": {"kind": "llama", "type": t, "extra": extra} for t in ggufs
                  for suffix, extra in (("", []), (" no-repack", ["--no-repack"]))})
    return ram, limit


class Plan:
    """What the rounds need: files, sizes, engines and run lengths."""

    def __init__(self, args, cfg, container, ggufs, tools):
        from ...format import token_bytes
        from ...format.reader import open_model
        for k in ("threads", "rounds", "prompt", "decode_prompt", "gen", "parallel", "limit_gen", "limits",
                  "bw_mib", "timeout", "limit_extra_mib", "profile_steps", "pool_workers", "pool_fraction",
                  "pool_parallel", "pool_warmup"):
            setattr(self, k, getattr(args, k))
        self.cfg, self.container, self.ggufs, self.tools = cfg, container, ggufs, tools
        self.container_bytes = os.path.getsize(container)
        with open_model(container) as m:
            layer = m.moe_layers[0]
            self.expert_bytes = m.expert_layout(layer).nbytes
            self.all_expert_bytes = sum(m.config.n_experts * m.expert_layout(i).nbytes for i in m.moe_layers)
            self.expert_bytes_per_token = m.config.top_k * sum(m.expert_layout(i).nbytes for i in m.moe_layers)
            self.token_bytes = token_bytes.ours(m)["total"]                 # what one decode token reads
            self.top_k, self.n_experts = m.config.top_k, m.config.n_experts
        self.dense_bytes = self.token_bytes - self.expert_bytes_per_token   # attention, routers, the LM head
        self.ram_engines, self.limit_engines = engines(args.preset, ggufs)

    def limit_bytes(self, frac):
        return int(frac * self.container_bytes) + (self.limit_extra_mib << 20)

    def kv_bytes(self, tokens):
        return (tokens + 1024) * shapes.kv_bytes_per_token(self.cfg)

    def cache_bytes(self, limit):
        """The expert RAM budget under a limit: what the weights every token reads (attention, routers, the
        LM head: they stay in the page cache), the runtime (RUNTIME_BYTES) and the KV cache leave."""
        return max(self.expert_bytes, limit - self.dense_bytes - RUNTIME_BYTES - self.kv_bytes(2 * self.prompt))


def prepare_files(args, cfg, routing, report, tools):
    d = prepare.folder(args.work, args.shape, args.layers, routing)
    hf, seconds = prepare.checkpoint(d, cfg, routing)
    report["files"] = {"folder": d, "checkpoint": {"bytes": shapes.nbytes(cfg), "build_s": seconds}}
    container, conv = prepare.container(hf, d, args.preset, args.convert_limit_mib << 20)
    report["files"]["colibri"] = {"path": container, "bytes": os.path.getsize(container), "convert": conv}
    ggufs = {}
    if tools is not None:
        try:
            ggufs, steps = prepare.ggufs(tools, hf, d, args.types, args.threads)
        except RuntimeError as exc:         # e.g. its converter OOM-killed: recorded, colibri still measured
            print(f"bench scale: llama.cpp's files could not be made; measuring colibri alone ({exc})"[:2000],
                  flush=True)
            report["files"]["llama_cpp"] = {"bin": tools.bin, "error": str(exc)[-3000:], "gguf": {}}
            return d, container, {}, tools
        report["files"]["llama_cpp"] = {"bin": tools.bin, "steps": steps,
                                        "gguf": {t: {"path": p, "bytes": os.path.getsize(p)} for t, p in ggufs.items()}}
    return d, container, ggufs, tools


def routing_in_child(container, threads):
    r = run_counted([sys.executable, "-m", "colibri_dist.bench.scale.routing", container, str(threads)])
    if r["rc"] != 0:
        raise RuntimeError(f"routing measurement failed (exit {r['rc']}):\n{r['stderr'][-3000:]}")
    return json.loads(r["stdout"])


def main(argv=None):
    from ..kernels.run import machine
    from . import report as rep, summary
    args = parse_args(list(sys.argv[2:] if argv is None else argv))
    cfg = shapes.config(args.shape, args.layers)
    routing = {"skew": args.skew, "locality": args.locality}
    report = {"command": "colibri bench scale " + " ".join(sys.argv[2:] if argv is None else argv),
              "machine": machine(), "threads": args.threads, "shape": args.shape,
              "layers": args.layers, "config": cfg, "routing_knobs": routing, "started": time.ctime(),
              "pool_skipped": args.pool_skipped}
    if args.pool_skipped:
        print(f"bench scale: the pool stage is skipped: {args.pool_skipped}", flush=True)
    tools = None
    if args.llama_bin:
        from ..model import peer_llama
        tools = peer_llama.tools(args.llama_bin)       # fails first, before anything heavy
    d = prepare.folder(args.work, args.shape, args.layers, routing)
    try:
        d, container, ggufs, tools = prepare_files(args, cfg, routing, report, tools)
        report["routing"] = routing_in_child(container, args.threads)
        plan = Plan(args, cfg, container, ggufs, tools)
        report["sizes"] = {k: getattr(plan, k) for k in ("container_bytes", "expert_bytes", "all_expert_bytes",
                                                         "expert_bytes_per_token", "dense_bytes")}
        report["bytes_per_token"] = summary.token_bytes(plan)
        report["rounds"] = measure.rounds(plan)
        report["summary"] = summary.summarize(report, plan)
    finally:
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    rep.write(report, args)
    return 0
