"""The engine's CLI flags, generated from config.EngineArgs' fields: one spelling, help and check for all.

Role: `colibri generate`, `score` and `serve` call add_engine_flags(parser, FIELDS) and then
engine_args_of(args, FIELDS, model=...) -> EngineArgs, which front.open_llm opens. A field's metadata holds its
help, metavar, choices, its flag's spelling (`w8a8` is `--weights-only`, negated) and whether it takes a
byte size ("64MiB"). `colibri run` takes the same settings from its YAML job (EngineArgs.of_job).
"""
import argparse
import dataclasses
from typing import Optional

from ..config.engine_args import EngineArgs


def _size(text):
    from ..config import parse_size
    try:
        return parse_size(int(text) if text.isdigit() else text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _type_of(f):
    if f.metadata.get("size"):
        return _size
    return int if f.type is int or f.type == Optional[int] else str


def flag_of(f):
    spelled = f.metadata.get("flag")
    return spelled if isinstance(spelled, str) else "--" + f.name.replace("_", "-")


def add_engine_flags(parser, names):
    """One flag per EngineArgs field in `names` (in that order), its default the field's."""
    fields = {f.name: f for f in dataclasses.fields(EngineArgs)}
    for name in names:
        f = fields[name]
        meta, default = f.metadata, f.default
        if meta.get("negate"):
            parser.add_argument(flag_of(f), dest=name, action="store_false", default=True, help=meta["help"])
        elif f.type in (bool, "bool"):
            parser.add_argument(flag_of(f), dest=name, action="store_true", default=default, help=meta["help"])
        else:
            more = {"choices": meta["choices"]} if meta.get("choices") else {"metavar": meta.get("metavar")}
            shown = "" if default is None else f" (default {default})"
            parser.add_argument(flag_of(f), dest=name, type=_type_of(f), default=default,
                                help=meta["help"] + shown, **more)


def engine_args_of(args, names, **fixed):
    """EngineArgs from the parsed flags of `names` (those add_engine_flags added), plus `fixed` (model=, ...);
    a refused setting is named by its flag."""
    from ..errors import InvalidArgument
    given = {k: getattr(args, k) for k in names}
    given.update(fixed)
    try:
        return EngineArgs(**given)
    except InvalidArgument as exc:
        fields = {f.name: f for f in dataclasses.fields(EngineArgs)}
        if exc.parameter not in fields:
            raise
        raise InvalidArgument(f"{flag_of(fields[exc.parameter])}: {exc}", parameter=exc.parameter,
                              value=exc.value) from None
