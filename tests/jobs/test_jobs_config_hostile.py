"""Hostile job configs (issue 15, defect 6): each is one ConfigError naming file:line:column
and the key, and `colibri run` exits 2 with one `colibri: error:` line, never a traceback."""
import re

import pytest

from colibri_dist import config as C
from colibri_dist.cli import main
from colibri_dist.errors import ConfigError

HEAD = "job:\n  kind: token-classification\n"

CASES = {
    "deep-pool": (HEAD + "pool: " + "[" * 50000 + "]" * 50000 + "\n", "pool", "nested"),
    "deep-block": (HEAD + "demo:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(3000)), "demo", "nested"),
    "huge-size": (HEAD + "pool:\n  cache_bytes: \"1" + "9" * 400 + "\"\n", "pool.cache_bytes", "byte size"),
    "huge-size-float": (HEAD + "pool:\n  cache_bytes: \"1" + "9" * 400 + ".5GiB\"\n", "pool.cache_bytes",
                        "byte size"),
    "nan-threshold": (HEAD + "pool:\n  balancer: {threshold: .nan}\n", "pool.balancer.threshold", "finite"),
    "inf-threshold": (HEAD + "pool:\n  balancer: {threshold: .inf}\n", "pool.balancer.threshold", "finite"),
    "nan-log-every": (HEAD + "report:\n  log_every_s: .nan\n", "report.log_every_s", "finite"),
    "inf-log-every": (HEAD + "report:\n  log_every_s: .inf\n", "report.log_every_s", "finite"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_config_is_one_located_error(tmp_path, capsys, name):
    text, key, words = CASES[name]
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        C.load_config(path)
    msg = str(info.value)
    assert re.match(re.escape(str(path)) + r":\d+:\d+: ", msg), msg[:300]
    assert key in msg and words in msg, msg[:300]
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("colibri: error:")


def test_parse_size_huge_values_are_value_errors():
    for text in ["1" + "9" * 400, "1e999", "9" * 30 + "TiB", "nan", "inf"]:
        with pytest.raises(ValueError):
            C.parse_size(text)
    with pytest.raises(ValueError):
        C.parse_size(2 ** 70)
    assert C.parse_size("1.5KiB") == 1536


def test_fifo_or_directory_config_is_one_error(tmp_path):
    import os
    os.mkfifo(tmp_path / "job.yaml")
    for path in (tmp_path / "job.yaml", tmp_path):
        with pytest.raises(ConfigError, match="not a regular file"):
            C.load_config(path)
