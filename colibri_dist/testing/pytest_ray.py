"""A pytest plugin for test sessions that start Ray: a Ray that dies fails its module, never the session.

Role: tests/conftest.py loads it (`pytest_plugins`); any pytest run can with `-p colibri_dist.testing.pytest_ray`.
  * On load it sets RAY_gcs_rpc_server_reconnect_timeout_s (GCS_RECONNECT_S, unless set) before Ray is
    imported: Ray's C++ GCS client ends the whole process ("Failed to connect to GCS within 60 seconds ...
    GCS may have been killed", then a quick exit, no Python unwinding) once the GCS has been unreachable
    that long, which killed a pytest session silently when a module's GCS died on a loaded machine. Every
    Ray process started from this one (raylet, workers) inherits the setting.
  * Before each test, when this process is connected to a local Ray whose GCS process has exited, the
    test fails with a message naming the GCS pid and its log (`dead_ray_text`), instead of hanging on it;
    the module's other tests fail the same way and the next module starts its own Ray.
  * `init_local(...)` / `connect_local(...)`: ray.init on loopback / ray_setup.connect(None), start-up retried
    (ATTEMPTS) with a load-scaled pause; the module fixtures start their Ray through them.
"""
import os
import time

GCS_RECONNECT_S = 3600          # longer than any module: a lost GCS is seen here, not by Ray's exit
ATTEMPTS = 3
os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(GCS_RECONNECT_S))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import pytest  # noqa: E402


def init_local(num_cpus=None, **kwargs):
    """ray.init on 127.0.0.1 (colibri's namespace, no dashboard), start-up retried (`retried`)."""
    import ray                                  # here, so a session without Ray never imports it
    from ..pool.ray_setup import NAMESPACE
    kwargs = dict(dict(include_dashboard=False, logging_level="WARNING", namespace=NAMESPACE), **kwargs)
    return retried(lambda: ray.init(address="local", _node_ip_address="127.0.0.1",
                                    num_cpus=num_cpus or os.cpu_count(), **kwargs))


def connect_local(num_cpus=None):
    """pool.ray_setup.connect(None) (token auth, the reaper), start-up retried (`retried`)."""
    from ..pool.ray_setup import connect
    return retried(lambda: connect(None, num_cpus=num_cpus))


def retried(start, pause=time.sleep):
    """start() up to ATTEMPTS times, with ray.shutdown() and a pause growing with the load between; the
    last failure says how often it was tried."""
    import ray
    from ..pool.ray_setup import load_factor
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return start()
        except Exception as exc:
            ray.shutdown()
            if attempt == ATTEMPTS:
                raise RuntimeError(f"a local Ray did not start in {ATTEMPTS} attempts (load factor "
                                   f"{load_factor():.1f}): {exc}") from exc
            pause(5 * attempt * load_factor())


def gcs_process():
    """(pid, log path) of the GCS of the local Ray this process started, or None (not started here)."""
    import ray
    node = getattr(ray._private.worker, "_global_node", None)
    infos = (getattr(node, "all_processes", None) or {}).get("gcs_server") or []
    if not infos or not ray.is_initialized():
        return None
    log = os.path.join(node.get_session_dir_path(), "logs", "gcs_server.out")
    return infos[0].process.pid, log


def dead_ray_text():
    """Why this process's local Ray is unusable (its GCS exited), or None when it is fine or not here."""
    import sys
    if "ray" not in sys.modules:
        return None
    found = gcs_process()
    if found is None or _alive(found[0]):
        return None
    pid, log = found
    return (f"this module's Ray is gone: its GCS server (pid {pid}) exited (killed, or out of memory on a "
            f"loaded machine; see {log}). The module's remaining tests fail here instead of hanging; the next "
            f"module starts its own Ray. Rerun this module alone to retry it.")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture(autouse=True)
def _ray_alive():
    """Fail the test at once when the module's local Ray has lost its GCS."""
    text = dead_ray_text()
    if text is not None:
        pytest.fail(text, pytrace=False)
    yield
