"""YAML job configs: load, validate against a typed schema, report errors with file:line:column.

Role in the data flow: the first thing `colibri run` / `colibri pool start` /
`colibri stress` do. A config file becomes a tree of frozen-ish dataclasses
(JobConfig, PoolConfig, ...) or a ConfigError whose message names the file, the
line and column, the key path (e.g. `pool.balancer.kind`) and what was expected.

Public entry points (documented in docs/CONFIG.md):
    load_config(path) -> JobConfig                 # a whole job file (job, model, pool, routing, demo, report)
    load_service_config(path) -> ServiceConfig     # only model/pool/routing (other known sections ignored)
    load_pool_section(path) -> PoolConfig          # the `pool:` section alone
    parse_section(cls, data, source="<dict>")      # validate a plain dict (CLI overrides, tests)
    parse_size("64MiB") -> int
"""
import dataclasses
import decimal
import math
import os
import re
import typing
from dataclasses import dataclass, field
from typing import Optional, Union

import yaml

from .errors import ConfigError

# ---------------------------------------------------------------- schema helpers


class Size(int):
    """Marker type: a byte count given as an int or a string like "64MiB"."""


class RawMapping(dict):
    """Marker type: a free-form mapping validated by the room that uses it (e.g. job.sampling_params,
    checked against SamplingParams by the generation jobs). `where[key]` is "file:line:column" of
    each key, `at` that of the mapping, so those checks can name the position too."""
    where = {}
    at = ""


def _enum(*choices, default, doc=""):
    return field(default=default, metadata={"choices": choices, "doc": doc})


def _opt(default, doc=""):
    return field(default=default, metadata={"doc": doc})


REQUIRED = dataclasses.MISSING

# ---------------------------------------------------------------- the schema


@dataclass
class BalancerConfig:
    kind: str = _enum("token-bucket", "round-robin", "home", default="token-bucket")
    window: int = 64
    threshold: float = 1.3      # most / least loaded worker (routing/balancer.py): 2 workers -> 1.13 x mean


@dataclass
class NumaConfig:
    enabled: bool = True
    workers_per_node: int = 1
    mem_policy: str = _enum("bind", "interleave", "preferred", "none", default="bind")
    sysfs_root: Optional[str] = None


@dataclass
class PoolConfig:
    name: Optional[str] = None
    workers: int = 2
    threads_per_worker: Optional[int] = None
    cache_bytes: Optional[Size] = None
    offload_dir: Optional[str] = None
    offload_compression: str = _enum("none", "zstd", default="none")
    policy: str = _enum("lru", "lfu", "lfru", default="lru")
    replicas: int = 0
    balancer: BalancerConfig = field(default_factory=BalancerConfig)
    ray_address: Optional[str] = None
    numa: NumaConfig = field(default_factory=NumaConfig)


@dataclass
class RoutingConfig:
    policy: str = _enum("exact", "balanced", default="exact")


@dataclass
class JobSection:
    kind: str = field(default=REQUIRED, metadata={"choices": ("moe-layer", "token-classification", "generate",
                                                               "score")})
    input: Optional[str] = None
    output: Optional[str] = None
    batch_tokens: int = 1024
    layers: Union[str, int, list] = "all"          # "all" | layer number | list of layer numbers
    shard_rows: Optional[int] = None
    input_format: str = _enum("auto", "ids", "text", default="auto")
    ids_field: str = "input_ids"
    text_field: str = "text"
    id_field: str = "id"
    tokenizer: Optional[str] = None
    executor: str = _enum("pool", "engine", default="pool")
    threads: Optional[int] = None
    # generate / score
    prompt_field: str = "prompt"
    messages_field: str = "messages"
    prompt_ids_field: str = "prompt_token_ids"
    sampling_field: str = "sampling_params"
    sampling_params: RawMapping = field(default_factory=RawMapping)
    seed: int = 0
    on_error: Optional[str] = _enum("continue", "fail", default=None)
    max_num_seqs: int = 64
    prefill_chunk: Optional[int] = None
    w8a8: bool = False
    kv_cache_bytes: Optional[Size] = None
    kv_cache_dtype: str = _enum("f32", "f16", "bf16", default="f32")
    max_seq_len: Optional[int] = None
    chat_template_timeout_s: float = 2.0        # = generate.safe_text.TemplateLimits() (tests check they agree)
    chat_template_max_chars: int = 4 << 20


@dataclass
class DemoDatasetConfig:
    shards: int = 8
    rows_per_shard: int = 64
    seq_len: int = 32


@dataclass
class DemoConfig:
    seed: int = 0
    vocab_size: int = 512
    hidden: int = 128
    inter: int = 256
    layers: int = 4
    experts: int = 8
    top_k: int = 2
    classes: int = 5
    scheme: str = _enum("int8", "int8-g32", "int8-g64", "int8-g128", "int8-minmax", "f16", "bf16", "f32",
                        default="int8")
    cache_dir: Optional[str] = None
    dataset: DemoDatasetConfig = field(default_factory=DemoDatasetConfig)


@dataclass
class DemoLLMConfig:
    seed: int = 0
    layers: int = 4
    experts: int = 16
    scheme: str = _enum("int8", "int8-g32", "int8-g64", "int8-g128", "int8-minmax", "f16", "bf16", "f32",
                        default="int8")
    prompts: int = 64
    shards: int = 4
    max_tokens: int = 8
    cache_dir: Optional[str] = None


@dataclass
class ReportConfig:
    html: bool = True
    summary: bool = True
    progress: str = _enum("auto", "bar", "log", "none", default="auto")
    expert_heat: bool = True
    log_every_s: float = 5.0


@dataclass
class JobConfig:
    job: JobSection = REQUIRED
    model: Optional[str] = None
    pool: PoolConfig = field(default_factory=PoolConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    demo: DemoConfig = field(default_factory=DemoConfig)
    demo_llm: DemoLLMConfig = field(default_factory=DemoLLMConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    source: Optional[str] = field(default=None, metadata={"internal": True})


@dataclass
class ServiceConfig:
    model: Optional[str] = None
    pool: PoolConfig = field(default_factory=PoolConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    source: Optional[str] = field(default=None, metadata={"internal": True})


SERVICE_IGNORES = ("job", "demo", "demo_llm", "report")   # known sections a service/pool file may carry

# ---------------------------------------------------------------- sizes

_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024 ** 2, "mb": 1000 ** 2,
               "mib": 1024 ** 2, "g": 1024 ** 3, "gb": 1000 ** 3, "gib": 1024 ** 3,
               "t": 1024 ** 4, "tb": 1000 ** 4, "tib": 1024 ** 4}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


MAX_SIZE = 2 ** 63 - 1     # what an off_t / int64 byte count can hold


def parse_size(value):
    """int or "64MiB"/"1.5GB"/"512k" -> bytes (0 <= int <= MAX_SIZE). Raises ValueError with what was expected."""
    if isinstance(value, bool):
        raise ValueError("expected a byte size (int or string like '64MiB')")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("expected a non-negative byte size")
        if value > MAX_SIZE:
            raise ValueError(f"byte size {value} is larger than {MAX_SIZE}")
        return value
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m and m.group(2).lower() in _SIZE_UNITS:
            size = int(decimal.Decimal(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])   # exact, no float overflow
            if size > MAX_SIZE:
                raise ValueError(f"byte size {value[:40]!r}{'...' if len(value) > 40 else ''} is larger than "
                                 f"{MAX_SIZE} bytes")
            return size
    raise ValueError(f"expected a byte size like 1048576, '64MiB', '512KB' or '2GiB', got {value!r}")

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


def _fail(where, path, message):
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
            _fail(_Where(source, key_node), path, "keys must be strings")
        if key in seen:
            _fail(_Where(source, key_node), _join(path, key), f"duplicate key (first at line {seen[key]})")
        seen[key] = key_node.start_mark.line + 1
        yield key, key_node, value_node


def _join(path, key):
    return f"{path}.{key}" if path else key


def _build_dataclass(cls, node, source, path, ignore=()):
    where = _Where(source, node) if node is not None else _Where(source, line=1, column=1)
    if node is None or (isinstance(node, yaml.ScalarNode) and _scalar_value(node) is None):
        items = []
    elif not isinstance(node, yaml.MappingNode):
        _fail(where, path, f"expected a mapping with keys {_key_list(cls)}, got {_type_name(node)}")
    else:
        items = list(_mapping_items(node, source, path))
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, key_node, value_node in items:
        if key in ignore:
            continue
        if key not in fields:
            _fail(_Where(source, key_node), _join(path, key), f"unknown key; expected one of {_key_list(cls)}")
        values[key] = _build_value(hints[key], fields[key], value_node, source, _join(path, key))
    for name, f in fields.items():
        if name in values:
            continue
        if f.default is not REQUIRED:
            values[name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[name] = f.default_factory()
        else:
            _fail(where, _join(path, name), f"missing required key{_expected_suffix(hints[name], f)}")
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
        _fail(where, path, f"expected {_describe(hint, f, optional)}, got {_type_name(node)}")
    value = _scalar_value(node)
    if value is None:
        if optional:
            return None
        _fail(where, path, f"expected {_describe(hint, f, optional)}, got null")
    return _check_scalar(hint, f, value, where, path, optional)


def _check_scalar(hint, f, value, where, path, optional):
    expected = _describe(hint, f, optional)
    if hint is Size:
        try:
            return parse_size(value)
        except ValueError as exc:
            _fail(where, path, str(exc))
    if hint is bool:
        if not isinstance(value, bool):
            _fail(where, path, f"expected {expected}, got {type(value).__name__} {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(where, path, f"expected {expected}, got {type(value).__name__} {value!r}")
        if abs(value) > MAX_SIZE:
            _fail(where, path, f"expected an integer of at most {MAX_SIZE}, got {str(value)[:40]}...")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(where, path, f"expected {expected}, got {type(value).__name__} {value!r}")
        if abs(value) > 1e300 or not math.isfinite(value):      # (abs first: a huge int overflows float())
            _fail(where, path, f"expected a finite number, got {str(value)[:40]}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            _fail(where, path, f"expected {expected}, got {type(value).__name__} {value!r}")
        choices = f.metadata.get("choices")
        if choices and value not in choices:
            _fail(where, path, f"expected one of {' | '.join(choices)}, got {value!r}")
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
        _fail(where, path, f"expected a mapping, got {_type_name(node)}")
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
                _fail(_Where(where.source, item), path, f"expected {expected}, got list item {_type_name(item)}")
            out.append(value)
        if not out:
            _fail(where, path, f"expected {expected}, got an empty list")
        return out
    value = _scalar_value(node) if isinstance(node, yaml.ScalarNode) else None
    if value == "all":
        return "all"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    _fail(where, path, f"expected {expected}, got {_type_name(node)}")

# ---------------------------------------------------------------- cross-field rules


class _Locator:
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


def _check_positive(obj, names, at, prefix):
    for name in names:
        value = getattr(obj, name)
        if value is not None and value <= 0:
            _fail(at(_join(prefix, name)), _join(prefix, name), f"expected a positive integer, got {value}")


def _validate_pool(pool, at, prefix="pool"):
    if pool.workers < 0:
        path = _join(prefix, "workers")
        _fail(at(path), path, f"expected an integer >= 0 (0 = run in-process), got {pool.workers}")
    if pool.replicas < 0:
        path = _join(prefix, "replicas")
        _fail(at(path), path, f"expected an integer >= 0, got {pool.replicas}")
    _check_positive(pool, ["threads_per_worker"], at, prefix)
    _check_positive(pool.balancer, ["window"], at, _join(prefix, "balancer"))
    if pool.balancer.threshold < 1.0:
        path = _join(prefix, "balancer.threshold")
        _fail(at(path), path, f"expected a number >= 1.0, got {pool.balancer.threshold}")
    _check_positive(pool.numa, ["workers_per_node"], at, _join(prefix, "numa"))


def _validate_job(cfg, at):
    job = cfg.job
    _check_positive(job, ["batch_tokens", "shard_rows", "threads", "max_num_seqs", "prefill_chunk",
                                 "kv_cache_bytes", "max_seq_len", "chat_template_max_chars"], at, "job")
    if job.chat_template_timeout_s <= 0:
        _fail(at("job.chat_template_timeout_s"), "job.chat_template_timeout_s",
              f"expected a positive number of seconds, got {job.chat_template_timeout_s}")
    if job.seed < 0:
        _fail(at("job.seed"), "job.seed", f"expected an integer >= 0, got {job.seed}")
    if job.input is None and cfg.model is not None:
        _fail(at("job"), "job.input", "missing required key: a model is given, so the input data must be too "
                                      "(only the demo model, `model: null`, comes with a generated dataset)")
    if job.input is None and job.kind == "moe-layer":
        _fail(at("job"), "job.input", "missing required key: the generated demo dataset is token ids, "
                                      "so a moe-layer job needs `job.input` (.npy shards)")
    if job.input is None and job.kind in ("generate", "score") and cfg.model is not None:
        _fail(at("job"), "job.input", f"missing required key: a {job.kind} job reads prompts from "
                                      f"`job.input` (JSONL or Parquet)")
    demo = cfg.demo
    _check_positive(demo, ["vocab_size", "hidden", "inter", "layers", "experts", "top_k", "classes"],
                    at, "demo")
    _check_positive(demo.dataset, ["shards", "rows_per_shard", "seq_len"], at, "demo.dataset")
    if demo.top_k > demo.experts:
        _fail(at("demo.top_k"), "demo.top_k", f"expected at most demo.experts ({demo.experts}), got {demo.top_k}")
    _check_positive(cfg.demo_llm, ["layers", "experts", "prompts", "shards", "max_tokens"], at, "demo_llm")
    if cfg.demo_llm.experts < 2:
        _fail(at("demo_llm.experts"), "demo_llm.experts", f"expected at least 2 (top-2 routing), got "
                                                          f"{cfg.demo_llm.experts}")
    if cfg.report.log_every_s <= 0:
        _fail(at("report.log_every_s"), "report.log_every_s",
              f"expected a positive number, got {cfg.report.log_every_s}")
    _validate_pool(cfg.pool, at)

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


def load_config(path, text=None):
    """Load and validate a job config file -> JobConfig. Relative paths are resolved against the file's directory."""
    source = os.fspath(path)
    text = _read(source) if text is None else text
    node = _compose(text, source)
    cfg = _build_dataclass(JobConfig, node, source, "")
    _validate_job(cfg, _Locator(source, node))
    base = os.path.dirname(os.path.abspath(source))
    _resolve_common(cfg, base)
    _resolve_paths(cfg.job, base, ["input", "output", "tokenizer"])
    _resolve_paths(cfg.demo, base, ["cache_dir"])
    _resolve_paths(cfg.demo_llm, base, ["cache_dir"])
    cfg.source = source
    return cfg


def load_service_config(path, text=None):
    """Load only `model`, `pool` and `routing` from a file (a job file works: its job/demo/report are skipped)."""
    source = os.fspath(path)
    text = _read(source) if text is None else text
    node = _compose(text, source)
    cfg = _build_dataclass(ServiceConfig, node, source, "", ignore=SERVICE_IGNORES)
    _validate_pool(cfg.pool, _Locator(source, node))
    _resolve_common(cfg, os.path.dirname(os.path.abspath(source)))
    cfg.source = source
    return cfg


def load_pool_section(path, text=None):
    """The validated `pool:` section of a config file -> PoolConfig."""
    return load_service_config(path, text).pool


def parse_section(cls, data, source="<dict>"):
    """Validate a plain Python mapping (e.g. CLI overrides) against a schema class, same errors as files."""
    node = yaml.compose(yaml.safe_dump(data), Loader=yaml.SafeLoader) if data is not None else None
    obj = _build_dataclass(cls, node, source, "")
    if cls is PoolConfig:
        _validate_pool(obj, _Locator(source, node), prefix="")
    return obj


def defaults_of(cls):
    """{key: default} for a schema class (nested sections as dicts, REQUIRED for required keys)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            out[f.name] = defaults_of(hints[f.name])
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = f.default
    return out


def as_dict(obj):
    """A config dataclass -> plain dict (for manifests and reports)."""
    data = dataclasses.asdict(obj)
    data.pop("source", None)
    return data
