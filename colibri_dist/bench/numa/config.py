"""Experiment config for `colibri numa bench --config FILE` (configs/numa-experiment.yaml).

Role: turns the YAML file into the parameter dict bench/numa/run.py runs with.
Top-level sections: `numa_bench:` (this file's schema, below) and those of a
pool service file (`model`, `pool`, `routing`: the shared shape of
docs/ARCHITECTURE.md, validated by colibri_dist.config.load_service_config;
the bench uses pool.numa.workers_per_node). Errors are ConfigError naming
file:line:column and the key path.
"""
import yaml

from ... import config as cfg
from ...errors import ConfigError

MEMORY = ("default", "local", "remote", "interleave")
THREADS = ("unpinned", "pinned")
SCHEMA = {  # key -> (kind, default): kinds "size", "int", "memory", "threads", "expert"
    "buffer_bytes": ("size", None), "repeats": ("int", None),
    "memory": ("memory", list(MEMORY)), "threads": ("threads", list(THREADS)),
    "expert": ("expert", None),
}
EXPERT_KEYS = ("hidden", "inter", "tokens")


def _where(path, node, key):
    mark = node.start_mark
    return f"{path}:{mark.line + 1}:{mark.column + 1}: {key}"


def _items(path, node, key):
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{_where(path, node, key)}: expected a mapping")
    return [(k.value, k, v) for k, v in node.value]


def _scalar(path, node, key):
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError(f"{_where(path, node, key)}: expected a scalar")
    return yaml.safe_load(yaml.serialize(node))


def _positive_int(path, node, key):
    value = _scalar(path, node, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{_where(path, node, key)}: expected an integer >= 1, got {value!r}")
    return value


def _choices(path, node, key, allowed):
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise ConfigError(f"{_where(path, node, key)}: expected a non-empty list of {' | '.join(allowed)}")
    values = [_scalar(path, item, key) for item in node.value]
    for item, value in zip(node.value, values):
        if value not in allowed:
            raise ConfigError(f"{_where(path, item, key)}: expected one of {' | '.join(allowed)}, got {value!r}")
    return values


def _value(path, node, key, kind):
    if kind == "size":
        try:
            return cfg.parse_size(_scalar(path, node, key))
        except ValueError as exc:
            raise ConfigError(f"{_where(path, node, key)}: {exc}") from None
    if kind == "int":
        return _positive_int(path, node, key)
    if kind in ("memory", "threads"):
        return _choices(path, node, key, MEMORY if kind == "memory" else THREADS)
    out = {}
    for name, key_node, value_node in _items(path, node, key):
        if name not in EXPERT_KEYS:
            raise ConfigError(f"{_where(path, key_node, key + '.' + str(name))}: unknown key; "
                              f"expected one of {', '.join(EXPERT_KEYS)}")
        out[name] = _positive_int(path, value_node, f"{key}.{name}")
    return out


def _pool_section(path, text, span):
    """The pool section via colibri_dist.config, with numa_bench blanked out so line numbers stay right."""
    lines = text.splitlines(keepends=True)
    if span is not None:
        for i in range(span[0], min(span[1], len(lines))):
            lines[i] = "\n"
    return cfg.load_service_config(path, text="".join(lines)).pool


def load_experiment(path):
    """-> (numa_bench overrides dict, workers_per_node) from an experiment YAML file.

    Besides numa_bench the file may hold the sections a pool service file holds
    (model, pool, routing); the bench uses pool.numa.workers_per_node.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read experiment config: {exc.strerror}") from None
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    overrides, span = {}, None
    for name, key_node, value_node in (_items(path, root, "<top level>") if root is not None else []):
        if name != "numa_bench":
            continue
        end = value_node.end_mark
        span = (key_node.start_mark.line, end.line + (1 if end.column else 0))
        for key, k_node, v_node in _items(path, value_node, "numa_bench"):
            if key not in SCHEMA:
                raise ConfigError(f"{_where(path, k_node, 'numa_bench.' + str(key))}: unknown key; "
                                  f"expected one of {', '.join(SCHEMA)}")
            overrides[key] = _value(path, v_node, f"numa_bench.{key}", SCHEMA[key][0])
    return overrides, _pool_section(path, text, span).numa.workers_per_node
