"""`colibri run [CONFIG] [--out DIR]`: run (or resume) a batch inference job from a YAML config.

Role in the data flow: argv -> config.load_config (ConfigError -> exit 2) ->
command-line overrides -> jobs.pipeline.run_job -> outputs, report.json,
report.html and a summary table; exit 0, 1 (incomplete), 3 (rows errored, see exit_code); on Ctrl-C,
what was kept and the command that resumes (resume_hint; exit 130).
A no-CONFIG job (--model --input) runs in-process unless the model exceeds the available RAM or
--workers/--executor ask for a pool. With no CONFIG it runs the packaged demo, a `generate` job on the
constructed demo LLM (colibri_dist/configs/demo.yaml; the repo's configs/demo.yaml is the same file).
A CONFIG that is not a file but the name of a packaged config (`demo-classify`, the token-classification
demo) runs that one.
"""
import json
import os
import shlex
import sys

from . import EXIT_ROW_ERRORS
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
                   help="override pool.workers (0 = run in-process on the MoeExecutor, no Ray)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="native threads: job.threads in-process, pool.threads_per_worker on a pool")
    p.add_argument("--executor", choices=["pool", "engine"], default=None, help="override job.executor")
    p.add_argument("--on-error", choices=["continue", "fail"], default=None,
                   help="override job.on_error (default: bad rows get error rows and the exit code is "
                        f"{EXIT_ROW_ERRORS}; continue = exit 0 anyway; fail = stop at the first)")
    p.add_argument("--kv-cache-bytes", default=None, metavar="SIZE",
                   help="override job.kv_cache_bytes, the KV cache budget (e.g. 1GiB)")
    p.add_argument("--max-seq-len", type=int, default=None, metavar="N", help="override job.max_seq_len")
    g = p.add_argument_group("sampling defaults (over job.sampling_params; a row's own sampling_params win)")
    for flag, kind, key in SAMPLING_FLAGS:
        g.add_argument(flag, type=kind, default=None, dest=f"sp_{key}", metavar="N" if kind is int else "X",
                       help=f"sampling_params.{key}")
    g.add_argument("--seed", type=int, default=None, metavar="S", help="override job.seed")
    add_progress(p)
    p.set_defaults(func=main)


SAMPLING_FLAGS = (("--max-tokens", int, "max_tokens"), ("--temperature", float, "temperature"),
                  ("--top-p", float, "top_p"), ("--top-k", int, "top_k"), ("--logprobs", int, "logprobs"))


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
        if args.workers is None and args.executor is None:
            cfg.pool.workers = default_workers(cfg.model)
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
    _job_overrides(cfg, args)
    return cfg


def _job_overrides(cfg, args):
    from ..config import parse_size
    from ..errors import InvalidArgument
    if args.on_error:
        cfg.job.on_error = args.on_error
    if args.kv_cache_bytes is not None:
        try:
            cfg.job.kv_cache_bytes = parse_size(args.kv_cache_bytes) or None
        except ValueError as exc:
            raise InvalidArgument(f"--kv-cache-bytes: {exc}, got {args.kv_cache_bytes!r}") from None
    if args.max_seq_len is not None:
        if args.max_seq_len < 1:
            raise InvalidArgument(f"--max-seq-len: expected an integer >= 1, got {args.max_seq_len}")
        cfg.job.max_seq_len = args.max_seq_len
    if args.seed is not None:
        cfg.job.seed = args.seed
    for flag, _, key in SAMPLING_FLAGS:
        value = getattr(args, f"sp_{key}")
        if value is not None:
            if cfg.job.kind != "generate":
                raise InvalidArgument(f"{flag} is a sampling setting of generate jobs, not of {cfg.job.kind!r}")
            cfg.job.sampling_params[key] = value


def default_workers(model, meminfo="/proc/meminfo"):
    """Workers for a no-YAML job: 0 (in-process, no Ray start-up) when the model file fits in the RAM
    available now, else the pool default (2 workers, each mapping its share of the experts)."""
    from ..config import PoolSection
    try:
        size = os.path.getsize(model)
    except OSError:
        return 0                        # the runner names the missing model
    avail = available_ram(meminfo)
    return 0 if avail is None or size <= avail else PoolSection().workers


def available_ram(meminfo="/proc/meminfo"):
    try:
        with open(meminfo) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def main(args):
    from ..errors import ColibriError
    from ..jobs.run.executors import uses_pool
    from ..jobs.pipeline import run_job
    cfg = load_job(args)
    if uses_pool(cfg) and not cfg.pool.name:
        warn_workers(cfg.pool.workers, "--workers" if args.workers is not None else "pool.workers")
    try:
        report = run_job(cfg, out_dir=args.out, restart=args.restart)
    except KeyboardInterrupt:
        print(resume_hint(args, cfg), file=sys.stderr, flush=True)
        raise
    except OSError as exc:       # disk full, permissions, --out is a file, ...: a runtime failure, exit 1
        raise ColibriError(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}") from exc
    return exit_code(report, cfg.job.on_error)


def resume_hint(args, cfg):
    """What an interrupted run kept, and the command that resumes it (the same one, without --restart)."""
    from ..jobs.run.partial import kept_count
    from ..jobs.pipeline import DEFAULT_OUT
    out = os.path.abspath(args.out or cfg.job.output or DEFAULT_OUT)
    argv = [a for a in getattr(args, "argv", None) or ["run"] if a != "--restart"]
    kept = kept_count(out)
    rows = f" and {kept} finished row(s) of the shards in flight" if kept else ""
    return (f"colibri run: interrupted; the shards written{rows} are kept in {out}; resume with: "
            f"colibri {shlex.join(argv)}")


def exit_code(report, on_error=None):
    """0 done; 1 incomplete; EXIT_ROW_ERRORS when a generate/score row errored and job.on_error (this
    run's setting: a finished job re-run with `--on-error continue` exits 0) is not `continue`."""
    if not report["complete"]:
        return 1
    kind = (report.get("job") or {}).get("kind")
    if report.get("errors") and kind in ("generate", "score") and on_error != "continue":
        return EXIT_ROW_ERRORS
    return 0
