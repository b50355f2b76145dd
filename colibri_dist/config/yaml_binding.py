"""YAML configs -> the schema's dataclasses, with errors naming file:line:column and the key path.

Role in the data flow: the first thing `colibri run` / `colibri pool start` / `colibri stress` do. A config
file becomes a tree of schema dataclasses (config/schema.py: JobConfig, PoolSection, ...) or a ConfigError
whose message names the file, the line and column, the key path (e.g. `pool.balancer.kind`) and what was
expected. Cross-field rules (positive sizes, required inputs) run here too, so they can name the position.

Public entry points (documented in docs/CONFIG.md):
    load_config(path) -> JobConfig                 # a whole job file (job, model, pool, routing, demo, report)
    load_service_config(path) -> ServiceConfig     # only model/pool/routing (other known sections ignored)
    load_pool_section(path) -> PoolSection         # the `pool:` section alone
    parse_section(cls, data, source="<dict>")      # validate a plain dict (CLI overrides, tests)
    load_sections(cls, path, text, check, resolve) # any schema of sections (the stress config's)
"""
import dataclasses
import math
import os
import typing
from typing import Union

import yaml

from ..errors import ConfigError
from .schema import (MAX_SIZE, REQUIRED, JobConfig, PoolSection, RawMapping, ServiceConfig, SERVICE_IGNORES,
                     Size, parse_size)

# ---------------------------------------------------------------- YAML -> marked tree


class _Where:
    """A node's position: file name and 1-based line/column."""

    def __init__(self, source, node=None, line=None, column=None):
        self.source = source
        if node is not None:
            line, column = node.start_mark.line + 1, node.start_mark.column + 1
        self.line, self.column = line, column

    def __str__(self):
        if self.line is None:
            return self.source
        return f"{self.source}:{self.line}:{self.column}"


def fail(where, path, message):
    key = path or "<top level>"
    raise ConfigError(f"{where}: {key}: {message}")


MAX_DEPTH = 64    # nesting of mappings/lists; the schema needs 3, PyYAML's composer recurses per level


def _check_depth(text, source):
    """Refuse deep nesting before composing (the event parser is iterative; the composer is not)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                where = _Where(source, line=event.start_mark.line + 1, column=event.start_mark.column + 1)
                path = _path_at(text, event.start_mark.line)
                raise ConfigError(f"{where}: {path}: nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _path_at(text, line):
    """The top-level key a line belongs to (for messages about input too deep to compose)."""
    for row in reversed(text.splitlines()[:line + 1]):
        if row[:1].isalpha() and ":" in row:
            return row.split(":", 1)[0].strip()
    return "<top level>"


def _compose(text, source):
    try:
        _check_depth(text, source)
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise ConfigError(f"{source}:1:1: <top level>: nested too deeply to read") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _Where(source, line=mark.line + 1, column=mark.column + 1) if mark else _Where(source)
        raise ConfigError(f"{where}: invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from None


def _scalar_value(node):
    return yaml.SafeLoader(" ").construct_object(node, deep=True)


def _type_name(node):
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    value = _scalar_value(node)
    return "null" if value is None else f"{type(value).__name__} {value!r}"

# ---------------------------------------------------------------- node validation


def _mapping_items(node, source, path):
    seen = {}
    for key_node, value_node in node.value:
        key = _scalar_value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, str):
            fail(_Where(source, key_node), path, "keys must be strings")
        if key in seen:
            fail(_Where(source, key_node), _join(path, key), f"duplicate key (first at line {seen[key]})")
        seen[key] = key_node.start_mark.line + 1
        yield key, key_node, value_node


def _join(path, key):
    return f"{path}.{key}" if path else key


def _build_dataclass(cls, node, source, path, ignore=()):
    where = _Where(source, node) if node is not None else _Where(source, line=1, column=1)
    if node is None or (isinstance(node, yaml.ScalarNode) and _scalar_value(node) is None):
        items = []
    elif not isinstance(node, yaml.MappingNode):
        fail(where, path, f"expected a mapping with keys {_key_list(cls)}, got {_type_name(node)}")
    else:
        items = list(_mapping_items(node, source, path))
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, key_node, value_node in items:
        if key in ignore:
            continue
        if key not in fields:
            fail(_Where(source, key_node), _join(path, key), f"unknown key; expected one of {_key_list(cls)}")
        values[key] = _build_value(hints[key], fields[key], value_node, source, _join(path, key))
    for name, f in fields.items():
        if name in values:
            continue
        if f.default is not REQUIRED:
            values[name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[name] = f.default_factory()
        else:
            fail(where, _join(path, name), f"missing required key{_expected_suffix(hints[name], f)}")
    return cls(**values)


def _key_list(cls):
    return ", ".join(f.name for f in dataclasses.fields(cls) if not f.metadata.get("internal"))


def _expected_suffix(hint, f):
    choices = f.metadata.get("choices")
    if choices:
        return f" (expected one of {' | '.join(choices)})"
    if dataclasses.is_dataclass(hint):
        return f" (a mapping with keys {_key_list(hint)})"
    return ""


def _build_value(hint, f, node, source, path):
    where = _Where(source, node)
    optional = typing.get_origin(hint) is Union and type(None) in typing.get_args(hint)
    if optional:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if dataclasses.is_dataclass(hint):
        return _build_dataclass(hint, node, source, path)
    if hint is RawMapping:
        return _raw_mapping(node, where, path, source)
    if path.endswith("layers") and hint == Union[str, int, list]:
        return _layers_value(node, where, path)
    if not isinstance(node, yaml.ScalarNode):
        fail(where, path, f"expected {_describe(hint, f, optional)}, got {_type_name(node)}")
    value = _scalar_value(node)
    if value is None:
        if optional:
            return None
        fail(where, path, f"expected {_describe(hint, f, optional)}, got null")
    return _check_scalar(hint, f, value, where, path, optional)


def _check_scalar(hint, f, value, where, path, optional):
    expected = _describe(hint, f, optional)
    if hint is Size:
        try:
            return parse_size(value)
        except ValueError as exc:
            fail(where, path, str(exc))
    if hint is bool:
        if not isinstance(value, bool):
            fail(where, path, f"expected {expected}, got {type(value).__name__} {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail(where, path, f"expected {expected}, got {type(value).__name__} {value!r}")
        if abs(value) > MAX_SIZE:
            fail(where, path, f"expected an integer of at most {MAX_SIZE}, got {str(value)[:40]}...")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail(where, path, f"expected {expected}, got {type(value).__name__} {value!r}")
        if abs(value) > 1e300 or not math.isfinite(value):      # (abs first: a huge int overflows float())
            fail(where, path, f"expected a finite number, got {str(value)[:40]}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            fail(where, path, f"expected {expected}, got {type(value).__name__} {value!r}")
        choices = f.metadata.get("choices")
        if choices and value not in choices:
            fail(where, path, f"expected one of {' | '.join(choices)}, got {value!r}")
        return value
    raise TypeError(f"schema type {hint!r} not supported at {path}")


def _describe(hint, f, optional):
    choices = f.metadata.get("choices")
    if choices:
        text = "one of " + " | ".join(choices)
    elif hint is Size:
        text = "a byte size (int or string like '64MiB')"
    else:
        text = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))
    return text + (" or null" if optional else "")


def _raw_mapping(node, where, path, source):
    out = RawMapping()
    out.at, out.where = str(where), {}
    if isinstance(node, yaml.ScalarNode) and _scalar_value(node) is None:
        return out
    if not isinstance(node, yaml.MappingNode):
        fail(where, path, f"expected a mapping, got {_type_name(node)}")
    for key, key_node, value_node in _mapping_items(node, source, path):
        out[key] = _scalar_value(value_node)
        out.where[key] = str(_Where(source, key_node))
    return out


def _layers_value(node, where, path):
    expected = "'all', a layer number, or a list of layer numbers"
    if isinstance(node, yaml.SequenceNode):
        out = []
        for item in node.value:
            value = _scalar_value(item) if isinstance(item, yaml.ScalarNode) else None
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                fail(_Where(where.source, item), path, f"expected {expected}, got list item {_type_name(item)}")
            out.append(value)
        if not out:
            fail(where, path, f"expected {expected}, got an empty list")
        return out
    value = _scalar_value(node) if isinstance(node, yaml.ScalarNode) else None
    if value == "all":
        return "all"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    fail(where, path, f"expected {expected}, got {_type_name(node)}")

# ---------------------------------------------------------------- cross-field rules


class Locator:
    """Finds the position of a key path in the composed YAML (the deepest part that exists)."""

    def __init__(self, source, root):
        self.source, self.root = source, root

    def __call__(self, path):
        node = self.root
        for key in [k for k in path.split(".") if k]:
            if not isinstance(node, yaml.MappingNode):
                break
            child = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
            if child is None:
                break
            node = child
        return _Where(self.source, node) if node is not None else _Where(self.source)


def check_positive(obj, names, at, prefix):
    for name in names:
        value = getattr(obj, name)
        if value is not None and value <= 0:
            fail(at(_join(prefix, name)), _join(prefix, name), f"expected a positive integer, got {value}")


def validate_pool(pool, at, prefix="pool"):
    if pool.workers < 0:
        path = _join(prefix, "workers")
        fail(at(path), path, f"expected an integer >= 0 (0 = run in-process), got {pool.workers}")
    if pool.replicas < 0:
        path = _join(prefix, "replicas")
        fail(at(path), path, f"expected an integer >= 0, got {pool.replicas}")
    check_positive(pool, ["threads_per_worker"], at, prefix)
    check_positive(pool.balancer, ["window"], at, _join(prefix, "balancer"))
    if pool.balancer.threshold < 1.0:
        path = _join(prefix, "balancer.threshold")
        fail(at(path), path, f"expected a number >= 1.0, got {pool.balancer.threshold}")
    check_positive(pool.numa, ["workers_per_node"], at, _join(prefix, "numa"))


def _validate_job(cfg, at):
    job = cfg.job
    check_positive(job, ["batch_tokens", "shard_rows", "threads", "max_num_seqs", "prefill_chunk",
                                 "kv_cache_bytes", "max_seq_len", "chat_template_max_chars"], at, "job")
    if job.chat_template_timeout_s <= 0:
        fail(at("job.chat_template_timeout_s"), "job.chat_template_timeout_s",
              f"expected a positive number of seconds, got {job.chat_template_timeout_s}")
    if job.seed < 0:
        fail(at("job.seed"), "job.seed", f"expected an integer >= 0, got {job.seed}")
    if job.input is None and cfg.model is not None:
        fail(at("job"), "job.input", "missing required key: a model is given, so the input data must be too "
                                      "(only the demo model, `model: null`, comes with a generated dataset)")
    if job.input is None and job.kind == "moe-layer":
        fail(at("job"), "job.input", "missing required key: the generated demo dataset is token ids, "
                                      "so a moe-layer job needs `job.input` (.npy shards)")
    if job.input is None and job.kind in ("generate", "score") and cfg.model is not None:
        fail(at("job"), "job.input", f"missing required key: a {job.kind} job reads prompts from "
                                      f"`job.input` (JSONL or Parquet)")
    demo = cfg.demo
    check_positive(demo, ["vocab_size", "hidden", "inter", "layers", "experts", "top_k", "classes"],
                    at, "demo")
    check_positive(demo.dataset, ["shards", "rows_per_shard", "seq_len"], at, "demo.dataset")
    if demo.top_k > demo.experts:
        fail(at("demo.top_k"), "demo.top_k", f"expected at most demo.experts ({demo.experts}), got {demo.top_k}")
    check_positive(cfg.demo_llm, ["layers", "experts", "prompts", "shards", "max_tokens"], at, "demo_llm")
    if cfg.demo_llm.experts < 2:
        fail(at("demo_llm.experts"), "demo_llm.experts", f"expected at least 2 (top-2 routing), got "
                                                          f"{cfg.demo_llm.experts}")
    if cfg.report.log_every_s <= 0:
        fail(at("report.log_every_s"), "report.log_every_s",
              f"expected a positive number, got {cfg.report.log_every_s}")
    validate_pool(cfg.pool, at)

# ---------------------------------------------------------------- entry points


def _read(path):
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isfile(path):     # a FIFO would block open(); a dir is no config
        raise ConfigError(f"{path}: cannot read config: not a regular file")
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: config is not UTF-8 text: {exc}") from None


def _resolve_paths(obj, base, names):
    for name in names:
        value = getattr(obj, name)
        if value is not None and not os.path.isabs(os.path.expanduser(value)) and not _is_address(name, value):
            setattr(obj, name, os.path.normpath(os.path.join(base, value)))
        elif value is not None:
            setattr(obj, name, os.path.expanduser(value))


def _is_address(name, value):
    return name == "ray_address"


def _resolve_common(cfg, base):
    _resolve_paths(cfg, base, ["model"])
    _resolve_paths(cfg.pool, base, ["offload_dir"])
    _resolve_paths(cfg.pool.numa, base, ["sysfs_root"])


def load_sections(cls, path, text=None, check=None, resolve=(), ignore=()):
    """Read, compose and build a schema of sections (a dataclass with `model` and `pool`) -> cls.
    check(cfg, at): its cross-field rules (at(key path) -> that key's position; default: the pool's);
    resolve: [(section, [field names])] of relative paths to resolve against the file's directory, beside
    `model`, `pool.offload_dir` and `pool.numa.sysfs_root`; ignore: top-level keys skipped."""
    source = os.fspath(path)
    text = _read(source) if text is None else text
    node = _compose(text, source)
    cfg = _build_dataclass(cls, node, source, "", ignore=ignore)
    (check or (lambda c, at: validate_pool(c.pool, at)))(cfg, Locator(source, node))
    base = os.path.dirname(os.path.abspath(source))
    _resolve_common(cfg, base)
    for section, names in resolve:
        _resolve_paths(getattr(cfg, section), base, names)
    cfg.source = source
    return cfg


def load_config(path, text=None):
    """Load and validate a job config file -> JobConfig. Relative paths are resolved against the file's directory."""
    return load_sections(JobConfig, path, text, _validate_job, resolve=[
        ("job", ["input", "output", "tokenizer"]), ("demo", ["cache_dir"]), ("demo_llm", ["cache_dir"])])


def load_service_config(path, text=None):
    """Load only `model`, `pool` and `routing` from a file (a job file works: its job/demo/report are skipped)."""
    return load_sections(ServiceConfig, path, text, ignore=SERVICE_IGNORES)


def load_pool_section(path, text=None):
    """The validated `pool:` section of a config file -> PoolSection."""
    return load_service_config(path, text).pool


def parse_section(cls, data, source="<dict>"):
    """Validate a plain Python mapping (e.g. CLI overrides) against a schema class, same errors as files."""
    node = yaml.compose(yaml.safe_dump(data), Loader=yaml.SafeLoader) if data is not None else None
    obj = _build_dataclass(cls, node, source, "")
    if cls is PoolSection:
        validate_pool(obj, Locator(source, node), prefix="")
    return obj

