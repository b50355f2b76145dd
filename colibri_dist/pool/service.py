"""Long-lived pool service: where a named pool's Ray lives, and a private Ray head if needed.

Role: `colibri pool start` needs a Ray that outlives the command. When no
address is given (config `pool.ray_address: null`, no --address, no RAY_ADDRESS)
it starts a loopback head (`ray start --head --block` in its own session, one
`numa_<i>` resource per NUMA node) and records it in a state file; `colibri pool
status|stop` and `colibri experts ...` read that file to find the pool, and
`colibri pool stop` ends that head by its pid (never `ray stop`, which would end
every Ray on the machine).

State file: $COLIBRI_STATE_DIR (default ~/.local/state/colibri)/pools/<name>.json
    {"name", "namespace", "address", "head_pid" (null if we joined a Ray), "model", "started"}
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from ..errors import PoolError
from .auth import ensure_token_auth
from .names import check_name


def state_dir():
    root = os.environ.get("COLIBRI_STATE_DIR") or os.path.join(os.path.expanduser("~"), ".local", "state", "colibri")
    path = os.path.join(root, "pools")
    os.makedirs(path, exist_ok=True)
    return path


def state_path(name):
    return os.path.join(state_dir(), f"{check_name(name)}.json")


def read_state(name):
    try:
        with open(state_path(name), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def write_state(name, state):
    tmp = state_path(name) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=2)
    os.replace(tmp, state_path(name))


def remove_state(name):
    try:
        os.unlink(state_path(name))
    except FileNotFoundError:
        pass


def pid_alive(pid):
    """True if the process exists and is not a zombie."""
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def resolve_address(name, address=None):
    """--address, else RAY_ADDRESS, else the recorded address of pool `name`, else None."""
    if address:
        return address
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    state = read_state(name)
    if state and (state.get("head_pid") is None or pid_alive(state["head_pid"])):
        return state["address"]
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _numa_resources():
    try:
        from .. import numa
        ids = [n.id for n in numa.topology().cpu_nodes]
    except Exception:
        ids = [0]
    return dict({f"numa_{i}": 1 for i in ids}, **{f"runner_numa_{i}": 1 for i in ids})  # cluster/numa-resources.sh


def start_local_head(name, num_cpus=None, timeout=None):
    """Start a loopback Ray head for pool `name`; returns (address, pid). timeout None: 90 s times the
    machine's load per core (a loaded 2-core box took longer than 90 s)."""
    from .ray_setup import load_factor
    timeout = 90.0 * load_factor() if timeout is None else timeout
    ray_bin = shutil.which("ray", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if ray_bin is None:
        raise PoolError("cannot start a local Ray head: the `ray` command is not installed next to this Python")
    log_path = os.path.join(state_dir(), f"{check_name(name)}.ray.log")
    ensure_token_auth()                  # the head (and every later join) requires the token
    port = _free_port()
    cmd = [ray_bin, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
           "--include-dashboard=false", "--disable-usage-stats",
           f"--num-cpus={num_cpus or os.cpu_count()}", f"--resources={json.dumps(_numa_resources())}",
           f"--temp-dir=/tmp/colibri-ray-{os.getuid()}-{port}"]
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    address = f"127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise PoolError(f"`ray start --head` exited with status {proc.returncode}; see {log_path}")
        with open(log_path, "rb") as f:
            if b"This command will now block forever" in f.read():
                return address, proc.pid
        time.sleep(0.5)
    stop_local_head(proc.pid)
    raise PoolError(f"Ray head did not come up within {timeout:.0f} s; see {log_path}")


def stop_local_head(pid, timeout=30.0):
    """SIGTERM the `ray start --block` process we started; it shuts its Ray down."""
    if not pid_alive(pid):
        return True
    os.kill(int(pid), signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            done, _ = os.waitpid(int(pid), os.WNOHANG)
        except ChildProcessError:
            done = 0 if pid_alive(pid) else pid
        if done or not pid_alive(pid):
            return True
        time.sleep(0.3)
    return False
