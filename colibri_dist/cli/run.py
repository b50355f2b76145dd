"""`colibri run [CONFIG] [--out DIR]`: run (or resume) a batch inference job from a YAML config.

Role in the data flow: argv -> config.load_config (ConfigError -> exit 2) ->
command-line overrides -> jobs.runner.run_job -> outputs, report.json,
report.html and a summary table. With no CONFIG it runs the packaged demo, a `generate` job on the
constructed demo LLM (colibri_dist/configs/demo.yaml; the repo's configs/demo.yaml is the same file).
A CONFIG that is not a file but the name of a packaged config (`demo-classify`, the token-classification
demo) runs that one.
"""
import os

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
        description="Run a batch inference job described by a YAML config (see docs/CONFIG.md). "
                    "Re-running into the same --out resumes at the first incomplete shard.")
    p.add_argument("config", nargs="?", default=None, metavar="CONFIG",
                   help="job config YAML, or the name of a packaged config (demo, demo-classify); "
                        "default: the packaged demo, configs/demo.yaml")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="output directory (default: job.output, else ./colibri-out)")
    p.add_argument("--restart", action="store_true",
                   help="discard what an earlier run wrote into --out instead of resuming")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="override pool.workers (0 = run in-process on the Engine, no Ray)")
    p.add_argument("--executor", choices=["pool", "engine"], default=None, help="override job.executor")
    p.add_argument("--progress", choices=["auto", "bar", "log", "none"], default=None,
                   help="override report.progress")
    p.set_defaults(func=main)


def main(args):
    from ..config import load_config
    from ..errors import ColibriError, InvalidArgument
    from ..jobs.runner import run_job
    cfg = load_config(resolve_config(args.config))
    if args.workers is not None:
        if args.workers < 0:
            raise InvalidArgument(f"--workers: expected an integer >= 0, got {args.workers}")
        cfg.pool.workers = args.workers
    if args.executor:
        cfg.job.executor = args.executor
    if args.progress:
        cfg.report.progress = args.progress
    try:
        report = run_job(cfg, out_dir=args.out, restart=args.restart)
    except OSError as exc:       # disk full, permissions, --out is a file, ...: a runtime failure, exit 1
        raise ColibriError(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}") from exc
    return 0 if report["complete"] else 1
