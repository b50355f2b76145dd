"""`colibri run [CONFIG] [--out DIR]`: run (or resume) a batch inference job from a YAML config.

Role in the data flow: argv -> config.load_config (ConfigError -> exit 2) ->
command-line overrides -> jobs.runner.run_job -> outputs, report.json,
report.html and a summary table. With no CONFIG it runs the packaged demo, a `generate` job on the
constructed demo LLM (colibri_dist/configs/demo.yaml; the repo's configs/demo.yaml is the same file).
A CONFIG that is not a file but the name of a packaged config (`demo-classify`, the token-classification
demo) runs that one.
"""
import json
import os

from .common import add_progress, warn_workers

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
DEMO_CONFIG = os.path.join(CONFIG_DIR, "demo.yaml")


def packaged_configs():
    return sorted(n[:-5] for n in os.listdir(CONFIG_DIR) if n.endswith(".yaml"))


def resolve_config(name):
    """CONFIG as given -> a path: an existing file, else a packaged config's name (`demo-classify`)."""
    if name is None:
        return DEMO_CONFIG
    if not os.path.exists(name) and os.sep not in name and not name.endswith((".yaml", ".yml")):
        packaged = os.path.join(CONFIG_DIR, name + ".yaml")
        if os.path.isfile(packaged):
            return packaged
    return name


def register(subparsers):
    p = subparsers.add_parser(
        "run", help="run a batch inference job (default: the demo)",
        description="Run a batch inference job described by a YAML config (see docs/CONFIG.md), or, with "
                    "--model and --input and no CONFIG, a generate (or --kind score) job with default settings. "
                    "Re-running into the same --out resumes at the first incomplete shard.")
    p.add_argument("config", nargs="?", default=None, metavar="CONFIG",
                   help="job config YAML, or the name of a packaged config (demo, demo-classify); "
                        "default: the packaged demo, configs/demo.yaml")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="output directory (default: job.output, else ./colibri-out)")
    p.add_argument("--restart", action="store_true",
                   help="discard what an earlier run wrote into --out instead of resuming")
    p.add_argument("--model", default=None, metavar="PATH", help="override `model:` (a .colibri file)")
    p.add_argument("--input", default=None, metavar="PATH", help="override job.input (file, directory or glob)")
    p.add_argument("--kind", choices=["generate", "score"], default=None,
                   help="job kind when no CONFIG is given with --model (default: generate)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="override pool.workers (0 = run in-process on the Engine, no Ray)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="native threads: job.threads in-process, pool.threads_per_worker on a pool")
    p.add_argument("--executor", choices=["pool", "engine"], default=None, help="override job.executor")
    add_progress(p)
    p.set_defaults(func=main)


def load_job(args):
    """CONFIG (or the demo, or --model/--input alone) + the command-line overrides -> JobConfig."""
    from ..config import load_config
    from ..errors import InvalidArgument
    for flag, value in (("--workers", args.workers), ("--threads", args.threads)):
        if value is not None and value < (0 if flag == "--workers" else 1):
            raise InvalidArgument(f"{flag}: expected an integer >= {0 if flag == '--workers' else 1}, got {value}")
    if args.config is None and args.model is not None:
        if args.input is None:
            raise InvalidArgument("--model without CONFIG needs --input (the prompts: JSONL or Parquet)")
        text = (f"job: {{kind: {args.kind or 'generate'}, input: {json.dumps(os.path.abspath(args.input))}}}\n"
                f"model: {json.dumps(os.path.abspath(args.model))}\n")
        cfg = load_config(os.path.join(os.getcwd(), "(command line)"), text=text)
    else:
        if args.kind is not None:
            raise InvalidArgument("--kind is only for a job given by --model and --input without CONFIG")
        cfg = load_config(resolve_config(args.config))
        if args.model is not None:
            cfg.model = os.path.abspath(args.model)
        if args.input is not None:
            cfg.job.input = os.path.abspath(args.input)
        if cfg.model is not None and cfg.job.input is None:
            raise InvalidArgument("--model replaces the demo model, so the input data must be given too "
                                  "(--input or job.input)")
    if args.workers is not None:
        cfg.pool.workers = args.workers
    if args.threads is not None:
        cfg.job.threads = cfg.pool.threads_per_worker = args.threads
    if args.executor:
        cfg.job.executor = args.executor
    if args.progress:
        cfg.report.progress = args.progress
    return cfg


def main(args):
    from ..errors import ColibriError
    from ..jobs.executors import uses_pool
    from ..jobs.runner import run_job
    cfg = load_job(args)
    if uses_pool(cfg) and not cfg.pool.name:
        warn_workers(cfg.pool.workers, "--workers" if args.workers is not None else "pool.workers")
    try:
        report = run_job(cfg, out_dir=args.out, restart=args.restart)
    except OSError as exc:       # disk full, permissions, --out is a file, ...: a runtime failure, exit 1
        raise ColibriError(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}") from exc
    return 0 if report["complete"] else 1
