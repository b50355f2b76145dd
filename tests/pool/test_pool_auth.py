"""Every Ray colibri starts requires Ray's token (issue 21 item 8): on a fresh HOME a local pool
creates ~/.ray/auth_token (0600) and a process without the token is refused; `colibri pool
start`'s head is started with token auth too. One local Ray for the module."""
import logging
import os
import stat
import subprocess
import sys

import pytest

from colibri_dist.pool import auth, service

_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")

INTRUDER = """
import os, ray
ray.init(address=os.environ["TARGET"], logging_level="ERROR")
print("RAN", ray.get(ray.remote(lambda: os.getuid()).options(num_cpus=0).remote(), timeout=30))
"""


@pytest.fixture(scope="module")
def fresh_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    saved = {k: os.environ.get(k) for k in _AUTH_ENV + ("HOME",)}
    for k in _AUTH_ENV:
        os.environ.pop(k, None)
    os.environ["HOME"] = str(home)
    yield home
    for k, v in saved.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    auth._refresh_ray()


@pytest.fixture(scope="module")
def local_ray(fresh_home):
    import ray
    from colibri_dist.pool.ray_setup import connect
    assert not (fresh_home / ".ray" / "auth_token").exists()
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    setup_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    setup_log.addHandler(handler)
    try:
        assert connect(None, num_cpus=1)
    finally:
        setup_log.removeHandler(handler)
    WARNINGS.extend(r.getMessage() for r in records)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


WARNINGS = []


def test_no_token_auth_warning_on_pool_start(local_ray):
    assert not [m for m in WARNINGS if "Token authentication is" in m], WARNINGS


def _intruder(address, home, **extra):
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "TARGET": address,
           **extra}
    return subprocess.run([sys.executable, "-c", INTRUDER], env=env, capture_output=True, text=True, timeout=120)


def test_fresh_home_gets_a_private_token(local_ray, fresh_home):
    token = fresh_home / ".ray" / "auth_token"
    assert token.exists() and stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(token.read_text().strip()) == 64 and os.environ["RAY_AUTH_MODE"] == "token"


def test_tokenless_process_is_refused(local_ray, tmp_path):
    # a refused driver retries the GCS once a second for 20 s (RAY_NUM_REDIS_GET_RETRIES); 2 tries say the same
    done = _intruder(local_ray, tmp_path, RAY_gcs_server_port_wait_time_s="2")
    assert done.returncode != 0 and "RAN" not in done.stdout, done.stdout + done.stderr[-2000:]
    assert "auth" in done.stderr.lower() or "token" in done.stderr.lower(), done.stderr[-2000:]


def test_process_with_the_token_is_let_in(local_ray, fresh_home):
    done = _intruder(local_ray, fresh_home, RAY_AUTH_MODE="token")
    assert done.returncode == 0 and f"RAN {os.getuid()}" in done.stdout, done.stderr[-2000:]


def test_existing_loose_token_is_tightened(tmp_path, monkeypatch):
    path = tmp_path / "tok"
    path.write_text("x" * 64)
    path.chmod(0o644)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert auth.ensure_token_auth() == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "x" * 64


def test_pool_start_head_runs_with_token_auth(local_ray, fresh_home, tmp_path, monkeypatch):
    seen = {}

    class Stop(Exception):
        pass

    def fake_popen(cmd, env=None, **kw):
        seen.update(cmd=cmd, env=env)
        raise Stop

    monkeypatch.setenv("COLIBRI_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.setattr(service.subprocess, "Popen", fake_popen)
    with pytest.raises(Stop):
        service.start_local_head("authcheck")
    assert seen["env"]["RAY_AUTH_MODE"] == "token"
