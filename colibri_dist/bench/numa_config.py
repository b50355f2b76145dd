"""Experiment config for `colibri numa bench --config FILE` (configs/numa-experiment.yaml).

Role: turns the YAML file into the parameter dict bench/numa.py runs with.
Two top-level sections: `pool:` (the shared pool shape of docs/ARCHITECTURE.md,
validated by colibri_dist.config; the bench uses pool.numa.workers_per_node)
and `numa_bench:` (this file's schema, below). Errors are ConfigError naming
file:line:column and the key path.
"""
import yaml

from .. import config as cfg
from ..errors import ConfigError

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


def load_experiment(path):
    """-> (numa_bench overrides dict, workers_per_node) from an experiment YAML file."""
    try:
        with open(path, encoding="utf-8") as f:
            root = yaml.compose(f.read(), Loader=yaml.SafeLoader)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read experiment config: {exc.strerror}") from None
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    if root is None:
        return {}, 1
    overrides, workers_per_node = {}, 1
    for name, key_node, value_node in _items(path, root, "<top level>"):
        if name == "pool":
            pool = cfg.parse_section(cfg.PoolConfig, yaml.safe_load(yaml.serialize(value_node)), source=f"{path}: pool")
            workers_per_node = pool.numa.workers_per_node
        elif name == "numa_bench":
            for key, k_node, v_node in _items(path, value_node, "numa_bench"):
                if key not in SCHEMA:
                    raise ConfigError(f"{_where(path, k_node, 'numa_bench.' + str(key))}: unknown key; "
                                      f"expected one of {', '.join(SCHEMA)}")
                overrides[key] = _value(path, v_node, f"numa_bench.{key}", SCHEMA[key][0])
        else:
            raise ConfigError(f"{_where(path, key_node, str(name))}: unknown section; expected pool or numa_bench")
    return overrides, workers_per_node
