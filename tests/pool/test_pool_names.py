"""Pool names are checked before they reach a path (issue 21 item 15): "../../escaped-pool"
is refused by PoolConfig, the state-file helpers and `colibri pool start`, and nothing is
written outside the state directory."""
import os

import pytest

from colibri_dist.cli import main
from colibri_dist.errors import InvalidArgument
from colibri_dist.pool import service
from colibri_dist.pool.config import PoolConfig
from colibri_dist.pool.names import check_name

BAD = ["../../escaped-pool", "a/b", "..", "x..y", "", ".hidden", "-flag", "a b", "é", "a" * 65, "a\0b", 7]


@pytest.mark.parametrize("name", BAD)
def test_bad_names_refused_everywhere(tmp_path, monkeypatch, name):
    monkeypatch.setenv("COLIBRI_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(InvalidArgument, match="is not allowed"):
        PoolConfig(name=name)
    for call in (service.state_path, service.read_state, lambda n: service.write_state(n, {}),
                 service.start_local_head):
        with pytest.raises(InvalidArgument, match="is not allowed"):
            call(name)


def test_good_names_pass():
    for name in ("default", "prod-1", "team_a.v2", "A" * 64):
        assert check_name(name) == name and PoolConfig(name=name).name == name


def test_cli_pool_start_refuses_escaping_name(tmp_path, monkeypatch, capsys):
    state = tmp_path / "deep" / "state"
    monkeypatch.setenv("COLIBRI_STATE_DIR", str(state))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = tmp_path / "job.yaml"
    cfg.write_text("model: /nonexistent.colibri\n")
    rc = main(["pool", "start", str(cfg), "--pool", "../../escaped-pool"])
    assert rc != 0 and "'../../escaped-pool' is not allowed" in capsys.readouterr().err
    written = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    assert written == [str(cfg)], written
