"""Config loading: defaults, sizes, and errors that name file:line:column, the key and what was expected."""
import os

import pytest

from colibri_dist import config as C
from colibri_dist.errors import ConfigError

GOOD = """\
job:
  kind: token-classification
  batch_tokens: 256
model: null
pool:
  workers: 3
  cache_bytes: 64MiB
  balancer: {kind: round-robin, window: 32}
"""


def write(tmp_path, text, name="job.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def load_error(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        C.load_config(path)
    return path, str(info.value)


def test_good_config_and_defaults(tmp_path):
    cfg = C.load_config(write(tmp_path, GOOD))
    assert cfg.job.kind == "token-classification" and cfg.job.batch_tokens == 256
    assert cfg.pool.workers == 3 and cfg.pool.cache_bytes == 64 * 2**20
    assert cfg.pool.balancer.kind == "round-robin" and cfg.pool.balancer.window == 32
    assert cfg.pool.balancer.threshold == 1.3 and cfg.pool.policy == "lru"
    assert cfg.routing.policy == "exact" and cfg.demo.hidden == 128 and cfg.report.html is True


@pytest.mark.parametrize("text, where, key, expected", [
    ("job:\n  kind: token-classification\n  batchtokens: 5\n", ":3:3:", "job.batchtokens",
     "unknown key; expected one of kind, input"),
    ("job:\n  kind: token-classification\npool:\n  workers: two\n", ":4:12:", "pool.workers",
     "expected an integer, got str 'two'"),
    ("job:\n  kind: classify\n", ":2:9:", "job.kind", "expected one of moe-layer | token-classification | generate | score"),
    ("job:\n  batch_tokens: 4\n", ":2:3:", "job.kind", "missing required key"),
    ("job:\n  kind: token-classification\npool:\n  cache_bytes: 12XB\n", ":4:16:", "pool.cache_bytes",
     "expected a byte size"),
    ("job:\n  kind: token-classification\nreport:\n  html: yes please\n", ":4:9:", "report.html",
     "expected true or false"),
    ("job:\n  kind: token-classification\npool:\n  balancer:\n    kind: fastest\n", ":5:11:",
     "pool.balancer.kind", "expected one of token-bucket | round-robin | home"),
    ("job:\n  kind: token-classification\n  kind: moe-layer\n", ":3:3:", "job.kind", "duplicate key"),
    ("job:\n  kind: moe-layer\n", ":2:3:", "job.input", "missing required key"),
    ("job:\n  kind: token-classification\n  layers: [0, x]\n", ":3:15:", "job.layers",
     "a list of layer numbers"),
    ("job:\n  kind: token-classification\npool:\n  workers: -1\n", ":4:12:", "pool.workers", ">= 0"),
    ("job:\n  kind: token-classification\ndemo:\n  top_k: 9\n", ":4:10:", "demo.top_k", "at most demo.experts"),
    ("job: [1, 2]\n", ":1:6:", "job", "expected a mapping"),
    ("job:\n  kind: [\n", ":3:1:", "", "invalid YAML"),
])
def test_errors_name_file_line_column_key_and_expectation(tmp_path, text, where, key, expected):
    path, message = load_error(tmp_path, text)
    assert message.startswith(path + where), message
    assert f" {key}: " in message or not key
    assert expected in message


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        C.load_config(str(tmp_path / "nope.yaml"))


def test_relative_paths_resolve_against_the_config_file(tmp_path):
    sub = tmp_path / "cfgs"
    sub.mkdir()
    cfg = C.load_config(write(sub, "job: {kind: moe-layer, input: ../data}\nmodel: m.colibri\n"
                                   "pool: {offload_dir: spill}\n"))
    assert cfg.job.input == str(tmp_path / "data")
    assert cfg.model == str(sub / "m.colibri") and cfg.pool.offload_dir == str(sub / "spill")


@pytest.mark.parametrize("text, value", [("1024", 1024), ("64MiB", 64 * 2**20), ("1.5GiB", 3 * 2**29),
                                         ("512KB", 512000), ("2k", 2048), (7, 7)])
def test_parse_size(text, value):
    assert C.parse_size(text) == value


@pytest.mark.parametrize("bad", ["-3", "12 parsecs", True, -1, "MiB"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        C.parse_size(bad)


def test_pool_section_alone(tmp_path):
    path = write(tmp_path, "model: m.colibri\npool:\n  workers: 4\n  replicas: 1\n")
    pool = C.load_pool_section(path)
    assert pool.workers == 4 and pool.replicas == 1 and pool.numa.enabled
    svc = C.load_service_config(write(tmp_path, GOOD, "svc.yaml"))   # a job file works too
    assert svc.pool.workers == 3 and svc.model is None
    with pytest.raises(ConfigError, match=r":2:1: bogus: unknown key"):
        C.load_pool_section(write(tmp_path, "pool: {workers: 1}\nbogus: 1\n", "bad.yaml"))


def test_parse_section_validates_dicts_like_files():
    pool = C.parse_section(C.PoolSection, {"workers": 0, "cache_bytes": "1MiB"})
    assert pool.workers == 0 and pool.cache_bytes == 2**20
    with pytest.raises(ConfigError, match="policy: expected one of lru | lfu | lfru"):
        C.parse_section(C.PoolSection, {"policy": "mru"})


def test_packaged_demo_configs_are_valid_and_match_repo_copies():
    import colibri_dist
    packaged = os.path.join(os.path.dirname(colibri_dist.__file__), "configs")
    repo = os.path.join(os.path.dirname(os.path.dirname(colibri_dist.__file__)), "configs")
    cfg = C.load_config(os.path.join(packaged, "demo.yaml"))
    assert cfg.job.kind == "generate" and cfg.model is None and cfg.job.input is None
    assert cfg.pool.workers == 2 and cfg.pool.cache_bytes is not None
    classify = C.load_config(os.path.join(packaged, "demo-classify.yaml"))
    assert classify.job.kind == "token-classification" and classify.model is None and classify.pool.workers == 2
    for name in ("demo.yaml", "demo-classify.yaml"):
        if os.path.exists(os.path.join(repo, name)):
            assert open(os.path.join(repo, name)).read() == open(os.path.join(packaged, name)).read()


def test_every_key_is_documented_in_config_md():
    import colibri_dist
    doc = os.path.join(os.path.dirname(os.path.dirname(colibri_dist.__file__)), "docs", "CONFIG.md")
    text = open(doc).read()

    def keys(cls, prefix):
        for name, default in C.defaults_of(cls).items():
            if isinstance(default, dict) and not isinstance(default, C.RawMapping):
                yield from keys(_section_type(cls, name), f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"
    missing = [k for k in keys(C.JobConfig, "") if f"`{k}`" not in text]
    assert not missing, f"keys not documented in docs/CONFIG.md: {missing}"


def _section_type(cls, name):
    import typing
    return typing.get_type_hints(cls)[name]
