"""A module whose Ray loses its GCS fails its remaining tests with a message; the pytest session goes on;
and a Ray start-up is retried under a load-scaled pause.

Run in a subprocess pytest (so this session is safe) over two small modules: the first starts a loopback
Ray and SIGKILLs its GCS, then its later tests would run a task and ask the GCS for the nodes (which, left
to Ray, blocks and then ends the whole process once the GCS has been unreachable for
gcs_rpc_server_reconnect_timeout_s); the second module has no Ray. The inner run must finish normally
(rc 1, the summary printed), the second module's test passing.
"""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEAD_RAY = '''
import os, signal, time
import pytest
import ray
from colibri_dist.pool.ray_setup import connect
from colibri_dist.testing.pytest_ray import gcs_process


@pytest.fixture(scope="module")
def local_ray():
    connect(None, num_cpus=1)
    yield
    ray.shutdown()


def test_kill_the_gcs(local_ray):
    assert ray.get(ray.put(1)) == 1
    pid, _ = gcs_process()
    os.kill(pid, signal.SIGKILL)
    while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[-1].split()[0] != "Z":
        time.sleep(0.1)


@pytest.mark.parametrize("i", [1, 2])
def test_after_the_gcs_died(local_ray, i):
    @ray.remote
    def f():
        return i
    assert ray.get(f.remote()) == i and ray.nodes()
'''


def test_a_dead_gcs_fails_its_module_not_the_session(tmp_path):
    (tmp_path / "test_a_dead_ray.py").write_text(DEAD_RAY)
    (tmp_path / "test_b_no_ray.py").write_text("def test_still_runs():\n    assert True\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_gcs_rpc")}   # Ray's default (60 s)
    env.update(PYTHONPATH=REPO, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                        "colibri_dist.testing.pytest_ray", str(tmp_path)], capture_output=True, text=True,
                       env=env, cwd=str(tmp_path), timeout=900)
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert "2 passed, 2 errors" in out, out                          # the summary: the session ended normally
    errors = out.split("short test summary")[0]                       # the summary's lines may repeat it, or be cut
    assert errors.count("this module's Ray is gone: its GCS server (pid") == 2, out
    assert "test_b_no_ray.py" not in out.split("short test summary")[-1], out


def test_a_ray_start_up_is_retried_with_a_growing_pause():
    from colibri_dist.pool.ray_setup import load_factor
    from colibri_dist.testing.pytest_ray import ATTEMPTS, retried
    calls, pauses = [], []

    def flaky():
        calls.append(1)
        if len(calls) < ATTEMPTS:
            raise TimeoutError("the GCS did not come up")
        return "up"
    assert retried(flaky, pause=pauses.append) == "up" and len(calls) == ATTEMPTS
    assert len(pauses) == ATTEMPTS - 1 and pauses[0] >= 5 and pauses[1] > pauses[0]
    with pytest.raises(RuntimeError, match=f"did not start in {ATTEMPTS} attempts .*the GCS did not come up"):
        retried(lambda: (_ for _ in ()).throw(TimeoutError("the GCS did not come up")), pause=pauses.append)
    assert load_factor() >= 1
