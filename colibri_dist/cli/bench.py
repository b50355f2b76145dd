"""`colibri bench NAME [options]`: run one benchmark (same as `python -m colibri_dist.bench NAME`).

Role in the data flow: a thin alias; each benchmark module in colibri_dist/bench
parses its own options, prints ratios against a baseline measured in the same
run and writes JSON.
"""
import argparse


def register(subparsers):
    from ..bench.__main__ import NAMES
    p = subparsers.add_parser(
        "bench", help="run a benchmark (kernels, store, pool, convert, numa)",
        description="Run a benchmark; options after NAME go to it (try `colibri bench NAME --help`).")
    p.add_argument("name", choices=NAMES, metavar="NAME", help=f"one of: {', '.join(NAMES)}")
    p.add_argument("options", nargs=argparse.REMAINDER, help="options passed to the benchmark")
    p.set_defaults(func=main)


def main(args):
    import importlib

    from ..bench.__main__ import MODULES
    from ..errors import InvalidArgument
    path = f"colibri_dist.bench.{MODULES[args.name]}"
    try:
        module = importlib.import_module(path)
    except ModuleNotFoundError as exc:
        if exc.name not in (path, path.rpartition(".")[0]):
            raise
        raise InvalidArgument(f"benchmark {args.name!r} is not built in this install") from None
    return module.main(list(args.options))
