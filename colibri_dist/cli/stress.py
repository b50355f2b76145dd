"""`colibri stress [CONFIG] [--workload moe|generation] [--duration S] [--batches N] [--out DIR]`: stress runs.

Role in the data flow: argv -> stress.settings.load_stress_config (ConfigError
-> exit 2) -> command-line overrides -> stress.harness.run_stress ->
<out>/report.json and a short summary. Exit 0 when every output matched the
all-resident reference bit for bit, no token was lost or duplicated and every
injected fault was recovered; 1 otherwise. With no CONFIG it runs the packaged
configs/offload-stress.yaml (configs/generation-stress.yaml with --workload generation: whole-model
requests through the pool, stress/generation.py).
"""
import json
import os


def register(subparsers):
    p = subparsers.add_parser(
        "stress", help="stress the offload path with injected faults (default: configs/offload-stress.yaml)",
        description="Drive a Ray pool under a RAM budget far below the working set with the SSD tier on, "
                    "inject faults on a schedule, check every output bit for bit against an all-resident "
                    "MoeExecutor, and write report.json (see docs/STRESS.md).")
    p.add_argument("config", nargs="?", default=None, metavar="CONFIG",
                   help="stress config YAML (default: the packaged configs/offload-stress.yaml)")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="override stress.duration_s")
    p.add_argument("--batches", type=int, default=None, metavar="N",
                   help="override stress.max_batches (stop after N batches if that comes first)")
    p.add_argument("--workload", choices=["moe", "generation"], default=None,
                   help="override stress.workload: MoE-layer batches (moe) or whole-model requests (generation; "
                        "default config configs/generation-stress.yaml)")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="generation: stop after N requests if that comes first")
    p.add_argument("--out", metavar="DIR", default="colibri-stress", help="output directory (default: ./colibri-stress)")
    p.set_defaults(func=main)


def main(args):
    from ..errors import InvalidArgument
    from ..stress.harness import run_stress
    from ..stress.settings import default_config_path, load_stress_config
    cfg = load_stress_config(args.config or default_config_path(args.workload or "moe"))
    if args.workload:
        cfg.stress.workload = args.workload
    if args.duration is not None and args.duration <= 0:
        raise InvalidArgument(f"--duration: expected a positive number of seconds, got {args.duration}")
    if args.batches is not None and args.batches <= 0:
        raise InvalidArgument(f"--batches: expected a positive integer, got {args.batches}")
    if args.requests is not None and args.requests <= 0:
        raise InvalidArgument(f"--requests: expected a positive integer, got {args.requests}")
    if cfg.stress.workload == "generation":
        from ..stress.generation import run_generation_stress
        report = run_generation_stress(cfg, args.out, duration_s=args.duration, max_requests=args.requests)
        print(generation_summary(report, os.path.join(args.out, "report.json")))
        return report["exit_code"]
    report = run_stress(cfg, args.out, duration_s=args.duration, max_batches=args.batches)
    print(summary(report, os.path.join(args.out, "report.json")))
    return report["exit_code"]


def generation_summary(rep, path):
    verdict = "PASSED" if rep["passed"] else "FAILED"
    if rep.get("interrupted"):
        verdict += f" (interrupted by {rep['interrupted']})"
    return "\n".join([
        f"colibri stress (generation) {verdict}: {rep['requests']} requests, {rep['tokens']} tokens "
        f"({rep['tokens_per_s']} tokens/s) in {rep['elapsed_s']} s",
        f"  mismatches {rep['mismatches']}  lost {rep['lost_requests']}  duplicated {rep['duplicated_requests']}",
        f"  faults injected {json.dumps(rep['faults_injected'], sort_keys=True)}  recovered "
        f"{json.dumps(rep['faults_recovered'], sort_keys=True)}"
        + (f"  UNRECOVERED {len(rep['faults_unrecovered'])}" if rep["faults_unrecovered"] else ""),
        f"  hot-adds {rep['hot_adds']}  removes {rep['hot_removes']}  table errors {len(rep['table_errors'])}",
        f"  report: {path}"])


def summary(rep, path):
    verdict = "PASSED" if rep["passed"] else "FAILED"
    if rep.get("interrupted"):
        verdict += f" (interrupted by {rep['interrupted']})"
    lines = [
        f"colibri stress {verdict}: {rep['batches']} batches, {rep['tokens']} tokens "
        f"({rep['tokens_per_s']} tokens/s) in {rep['elapsed_s']} s",
        f"  mismatches {rep['mismatches']}  lost {rep['lost_tokens']}  duplicated {rep['duplicated_tokens']}",
        f"  faults injected {json.dumps(rep['faults_injected'], sort_keys=True)}",
        f"  faults recovered {json.dumps(rep['faults_recovered'], sort_keys=True)}"
        + (f"  UNRECOVERED {len(rep['faults_unrecovered'])}" if rep["faults_unrecovered"] else ""),
        f"  RSS peak per worker {json.dumps(rep['rss_peak_bytes'], sort_keys=True)} "
        f"(budget {rep['rss_budget_bytes']} B, held: {rep['rss_held']})",
        f"  hit rates {json.dumps(rep['hit_rates'], sort_keys=True)}  spill bytes {rep['spill_bytes']}",
        f"  report: {path}",
    ]
    return "\n".join(lines)
