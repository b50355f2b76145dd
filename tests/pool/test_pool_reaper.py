"""After a SIGKILL of a driver that started a local Ray, no process of that Ray lingers (issue 21
item 22: the raylet's agents used to stay ~2 minutes): the reaper watchdog ends them. The driver is a
subprocess with its own Ray; this module starts no other."""
import os
import signal
import subprocess
import sys
import time

import pytest

from colibri_dist.pool import reaper

pytestmark = pytest.mark.ray

DRIVER = """
import sys, ray
from colibri_dist.pool.ray_setup import connect
connect(None, num_cpus=1)
print(ray._private.worker._global_node.get_session_dir_path(), flush=True)
sys.stdin.read()
"""


def test_sigkilled_driver_leaves_no_ray_process(tmp_path):
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        session = proc.stdout.readline().strip()
        assert session.rsplit("/", 1)[-1].startswith("session_"), session
        before = reaper.session_pids(session)
        assert len(before) >= 2, before                # raylet, GCS, agents, ...
    finally:
        proc.kill()                                     # SIGKILL: no atexit, no ray.shutdown
        proc.wait()
    deadline = time.monotonic() + 60                   # without the reaper the agents stay ~120 s
    while reaper.session_pids(session) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert reaper.session_pids(session) == [], [open(f"/proc/{p}/cmdline").read()[:120]
                                                 for p in reaper.session_pids(session)]


def test_reaper_refuses_anything_but_a_session_dir():
    assert reaper.main(["reaper", "/tmp"]) == 2 and reaper.main(["reaper", "/home/x/session-y"]) == 2
