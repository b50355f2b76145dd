"""How `colibri serve` stops, in a subprocess on 127.0.0.1: SIGTERM drains and exits 0 with nothing on stderr
(no Traceback, no C++ stack dump, no 'Aborted') and no process of its left behind (the engine process, and
with --workers the Ray it started); a busy port is one line of error before the model loads.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAY_LOG = re.compile(r"(\x1b\[[0-9;]*m)?\([^)]*\)")     # a line Ray forwards from its processes: "(raylet) ..."
GONE_WITHIN_S = 60          # a deadlock guard for the processes' exit, not a speed requirement


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    return dict(os.environ, PYTHONPATH=REPO, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", PYTHONUNBUFFERED="1")


def _descendants(pid):
    """Every process below pid (from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in _listdir(f"/proc/{p}/task"):
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                kids = []
            out += kids
            todo += kids
    return out


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _serve(model, *flags):
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "colibri_dist", "serve", model, "--port", str(port), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO)
    line = proc.stdout.readline()                  # the "colibri serve: ... on http://..." line, or EOF
    while RAY_LOG.match(line):                     # Ray's forwarded log lines, "(raylet) ...", may come first
        line = proc.stdout.readline()
    if not line.startswith("colibri serve"):
        _kill_all(proc)
        pytest.fail(f"the server did not start: {line!r}")
    return proc


def _kill_all(proc):
    """A failed test leaves no server behind: SIGKILL it and everything below it."""
    for pid in [proc.pid] + _descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.wait()


def _sigterm_and_check(proc):
    below = _descendants(proc.pid)
    try:
        assert below, "the server should have an engine process"
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=GONE_WITHIN_S)
    finally:
        if proc.poll() is None:
            _kill_all(proc)
    err = proc.stderr.read()
    assert rc == 0, err
    for bad in ("Traceback", "Aborted", "SIGTERM received", "*** ", "Error"):
        assert bad not in err, err
    deadline = time.monotonic() + GONE_WITHIN_S
    while any(_alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in below if _alive(p)], "processes of the server were left behind"


def test_sigterm_drains_the_default_server_and_exits_0(demo_model):
    _sigterm_and_check(_serve(demo_model))


@pytest.mark.ray
def test_sigterm_drains_a_server_with_ray_workers_and_leaves_no_ray_behind(demo_model):
    _sigterm_and_check(_serve(demo_model, "--workers", "1"))


def test_a_busy_port_is_one_line_before_the_model_loads(demo_model):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "colibri_dist", "serve", demo_model, "--port", str(port)],
                           capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (f"colibri: error: --port {port}: 127.0.0.1:{port} is already in use (another server?); "
                        f"pick another --port or stop what holds it\n")


@pytest.mark.ray
def test_sigterm_stops_ray_serve_without_a_stack_dump(demo_model):
    """Ray's core worker answers SIGTERM with a C++ stack dump and abort unless colibri's handler stays."""
    _sigterm_and_check(_serve(demo_model, "--ray-serve"))
