"""Running one command under a memory limit (a cgroup v1 memory group, as root) and counting what it read.

Role: MemoryLimit(bytes) makes /sys/fs/cgroup/memory/colibri-scale-<pid>, run(cmd) starts the command
inside it through a shell that joins the group and execs, waits with os.wait4 (ru_inblock: what the
command read from storage, in 512-byte blocks, the count /proc/<pid>/io read_bytes keeps; its peak RSS is
polled from /proc), and reads the group's peak usage, failcnt and OOM kills; join(pid) moves a running
process in (the pool stage's workers) and counters() reads the group's usage, peak, failcnt and OOM kills
now; close() removes the group. The page cache the command causes
is charged to the group, as it would be on a machine of that size. drop_cache(path) evicts a file's pages
(posix_fadvise DONTNEED) before a cold run. available() says why a limit cannot be set (not root, no v1
memory controller) so the bench can fall back to the RAM budget alone and say so.
"""
import os
import subprocess
import time

ROOT = "/sys/fs/cgroup/memory"


def available():
    """None when a memory cgroup can be made here, else the reason."""
    if os.geteuid() != 0:
        return "not root: no memory cgroup (the RAM budget alone limits colibri)"
    if not os.path.exists(os.path.join(ROOT, "memory.limit_in_bytes")):
        return f"no cgroup v1 memory controller at {ROOT}"
    return None


def drop_cache(path):
    """Evicts a file's (or every file's of a folder) pages from the page cache, written back first."""
    paths = [os.path.join(path, n) for n in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
    for p in paths:
        if os.path.isfile(p):
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)                       # dirty pages (a file just written) are not dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


class MemoryLimit:
    def __init__(self, limit_bytes, name=None):
        why = available()
        if why:
            raise RuntimeError(why)
        self.limit = int(limit_bytes)
        self.dir = os.path.join(ROOT, name or f"colibri-scale-{os.getpid()}")
        os.makedirs(self.dir, exist_ok=True)
        self._write("memory.limit_in_bytes", self.limit)
        self._write("memory.max_usage_in_bytes", 0)
        self._write("memory.failcnt", 0)

    def _write(self, key, value):
        with open(os.path.join(self.dir, key), "w") as f:
            f.write(str(value))

    def _read(self, key):
        with open(os.path.join(self.dir, key)) as f:
            return f.read()

    def run(self, cmd, timeout=None, env=None):
        """Runs cmd (a list) inside the group -> dict(rc, stdout, stderr, seconds, read_bytes, peak, failcnt,
        oom_kills). The group's peak is reset first."""
        self._write("memory.max_usage_in_bytes", 0)
        self._write("memory.failcnt", 0)
        kills0 = _oom_kills(self._read("memory.oom_control"))
        procs = os.path.join(self.dir, "cgroup.procs")
        return dict(run_counted(["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *cmd], timeout, env),
                    peak=int(self._read("memory.max_usage_in_bytes")),
                    failcnt=int(self._read("memory.failcnt")),
                    oom_kills=_oom_kills(self._read("memory.oom_control")) - kills0, limit=self.limit)

    def join(self, pid):
        """Moves a running process (all its threads) into the group: from now on what it faults in or allocates
        is charged here; what it held before stays charged where it was unless move_charges() took."""
        self._write("cgroup.procs", pid)

    def move_charges(self):
        """Asks the group to take a joining process's pages along (memory.move_charge_at_immigrate = 3): None when
        the kernel took it, else its reason (Linux 6.x removed charge moving and refuses the write)."""
        try:
            self._write("memory.move_charge_at_immigrate", 3)
            return None
        except OSError as exc:
            return f"memory.move_charge_at_immigrate refused: {exc.strerror}"

    def counters(self):
        """The group's usage and peak (bytes), failcnt (times the limit was hit) and OOM kills, now."""
        return {"usage": int(self._read("memory.usage_in_bytes")), "peak": int(self._read("memory.max_usage_in_bytes")),
                "failcnt": int(self._read("memory.failcnt")), "oom_kills": _oom_kills(self._read("memory.oom_control"))}

    def close(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)        # the last member is still exiting

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _oom_kills(text):
    for line in text.splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


def run_counted(cmd, timeout=None, env=None):
    """Runs cmd, reaps it with wait4 -> rc, output, wall seconds, the bytes it read from storage (ru_inblock)
    and its peak RSS: VmHWM of /proc/<pid>/status, polled every 0.1 s (wait4's ru_maxrss would also count
    what the forked child shared with this process before its exec)."""
    import tempfile
    import threading
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        timer = threading.Timer(timeout, p.kill) if timeout else None
        if timer:
            timer.start()
        peak, done = [0], threading.Event()
        poll = threading.Thread(target=_poll_hwm, args=(p.pid, peak, done), daemon=True)
        poll.start()
        _, status, ru = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t0
        done.set()
        poll.join()
        if timer:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)     # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        return dict(rc=p.returncode, stdout=out.read(), stderr=err.read(), seconds=seconds,
                    read_bytes=ru.ru_inblock * 512, peak_rss=peak[0])


def _poll_hwm(pid, peak, done):
    while not done.is_set():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak[0] = max(peak[0], int(line.split()[1]) * 1024)
        except (OSError, ValueError):
            pass
        done.wait(0.1)
