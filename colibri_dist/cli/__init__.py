"""`colibri` command-line entry point.

Role: parse argv, dispatch to one subcommand module per area, map errors to
exit codes (0 ok, 1 runtime failure or an incomplete job, 2 usage or config error, 3 a generate/score
job wrote error rows and job.on_error is not `continue`, 4 a numerical fault: the model's logits went
non-finite (NumericalError), 130 interrupted). stdout/stderr are PipeSafe
(cli/streams.py): `| head` never kills a job. Each module in
SUBCOMMANDS defines `register(subparsers)` which adds its parser(s) and sets
`func=callable(args) -> int` on them.
"""
import argparse
import importlib
import sys

from ..errors import ColibriError, ConfigError, InvalidArgument, NumericalError
from . import streams

# module name inside colibri_dist.cli, in help order
SUBCOMMANDS = ["convert", "run", "generate", "serve", "pool", "experts", "numa", "stress", "bench"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_ROW_ERRORS, EXIT_NUMERICAL = 0, 1, 2, 3, 4
# a module an optional extra brings -> that extra (pyproject.toml): a command that needs one says which
EXTRAS = {"fastapi": "serve", "uvicorn": "serve", "starlette": "serve", "gguf": "gguf", "pyarrow": "data",
          "pandas": "data"}


def build_parser():
    import colibri_dist       # the package facade (its __version__)
    parser = argparse.ArgumentParser(prog="colibri", description="Mixture-of-Experts inference on CPU servers")
    parser.add_argument("--version", action="version", version=f"colibri {colibri_dist.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            continue  # area not built yet
        module.register(sub)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse exits 2 on usage errors
    args.argv = list(sys.argv[1:] if argv is None else argv)   # `colibri run` says how to resume
    restore = streams.install()
    try:
        return int(args.func(args) or 0)
    except (ConfigError, InvalidArgument) as exc:
        print(f"colibri: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NumericalError as exc:
        print(f"colibri: error: {exc}", file=sys.stderr)
        return EXIT_NUMERICAL
    except ColibriError as exc:
        print(f"colibri: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"colibri: error: `colibri {args.command}` needs the {extra!r} extra (no module {exc.name!r}): "
              f"pip install 'colibri-dist[{extra}]'", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("colibri: interrupted", file=sys.stderr)
        return 130
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())
