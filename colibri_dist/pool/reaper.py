"""Reaper: end every process of a local Ray this driver started when the driver dies, even by SIGKILL.

Role: ray_setup.connect starts a private loopback Ray for a pool; Linux fate sharing ends its GCS and
raylet with the driver, but the raylet's children (dashboard and runtime-env agents, idle workers)
notice only after ~2 minutes (issue 21 item 22). connect() therefore starts this module as a tiny
watchdog (`python -m colibri_dist.pool.reaper SESSION_DIR` with a pipe from the driver as stdin):
on end-of-file (the driver exited, however) it SIGTERMs, then after a grace period SIGKILLs, each
process of this user whose command line names that session directory (unique per `ray.init`),
so only that Ray's processes are touched, never another Ray on the machine.
"""
import os
import signal
import subprocess
import sys
import time

GRACE_S = 1.0


def start(session_dir):
    """Spawn the watchdog for `session_dir`; it lives until this process (its stdin's writer) ends."""
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "colibri_dist.pool.reaper", session_dir], stdin=read,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            close_fds=True, env=dict(os.environ, PYTHONPATH=_package_root()))
    os.close(read)
    os.set_inheritable(write, False)
    return proc, write          # the driver keeps `write` open (never writes) until it exits


def _package_root():
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.pathsep.join([here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def session_pids(session_dir, me=None):
    """Pids of this user's processes whose command line contains session_dir (not `me`)."""
    uid, found, needle = os.getuid(), [], os.fsencode(session_dir)
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def reap(session_dir, grace_s=GRACE_S):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = session_pids(session_dir, me=os.getpid())
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if not pids:
            return
        time.sleep(grace_s)


def main(argv):
    session_dir = argv[1]
    if not session_dir.rstrip("/").split("/")[-1].startswith("session_"):
        return 2                 # only ever a Ray session directory
    while os.read(0, 4096):
        pass
    reap(session_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
