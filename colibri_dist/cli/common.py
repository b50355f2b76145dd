"""Flags and helpers every `colibri` subcommand spells the same way.

Role: one definition of the pool-name flag (`--pool NAME`, old spelling `--name`), the progress flag
(`--progress auto|bar|log|none`, old spelling `--no-progress` = none), the over-subscription warning
for `--workers` (attaching to a named pool is front.attach).
"""
import os
import sys

PROGRESS_CHOICES = ("auto", "bar", "log", "none")
DEFAULT_POOL = "default"


def add_pool_name(parser, default=DEFAULT_POOL):
    parser.add_argument("--pool", "--name", dest="pool", default=default, metavar="NAME",
                        help=f"name of the pool (default: {default!r}; --name is the old spelling)")


def add_progress(parser, default=None):
    parser.add_argument("--progress", choices=PROGRESS_CHOICES, default=default,
                        help="progress display: a bar on a terminal (auto), bar, log lines, or none")
    parser.add_argument("--no-progress", dest="progress", action="store_const", const="none",
                        help="same as --progress none (old spelling)")


def progress_enabled(args):
    return args.progress != "none"


def core_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def warn_workers(workers, flag="--workers", stream=None):
    """A warning (not an error) when more workers than cores are asked for; returns it or None."""
    cores = core_count()
    if workers is None or workers <= cores:
        return None
    text = (f"colibri: warning: {flag} {workers} is more than the {cores} core(s) this process may use; "
            f"the workers will share cores and run slower than fewer workers would")
    print(text, file=stream or sys.stderr, flush=True)
    return text
