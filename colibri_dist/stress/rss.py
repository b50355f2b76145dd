"""RSS sampling of every pool worker while the stress run goes on.

Role in the data flow: a background thread asks `pids()` (worker name -> pid,
from pool.stats()) every `period_s`, reads VmRSS and RssAnon from
/proc/<pid>/status, and keeps per worker the first sample (baseline, taken
before the run loads experts), the peak, and the pid history (a restarted
worker gets a new pid and a new baseline). The report compares the growth over
the baseline with the worker's cache budget.
"""
import threading
import time


def read_rss(pid, proc_root="/proc"):
    """{'VmRSS': bytes, 'RssAnon': bytes, 'RssFile': bytes} of a live pid, or None when it is gone."""
    try:
        with open(f"{proc_root}/{pid}/status") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            parts = rest.split()
            out[key] = int(parts[0]) * 1024 if parts else 0
    return out if "VmRSS" in out else None


class WorkerRss:
    def __init__(self, name):
        self.name = name
        self.pids = []
        self.baseline = {}        # pid -> first VmRSS sample
        self.peak = 0             # max VmRSS
        self.peak_anon = 0
        self.peak_growth = 0      # max over pids of (VmRSS - that pid's baseline)
        self.samples = 0

    def add(self, pid, rss):
        if pid not in self.baseline:
            self.pids.append(pid)
            self.baseline[pid] = rss["VmRSS"]
        self.samples += 1
        self.peak = max(self.peak, rss["VmRSS"])
        self.peak_anon = max(self.peak_anon, rss.get("RssAnon", 0))
        self.peak_growth = max(self.peak_growth, rss["VmRSS"] - self.baseline[pid])

    def summary(self, budget):
        return {"pids": list(self.pids), "samples": self.samples,
                "baseline_bytes": self.baseline[self.pids[0]] if self.pids else 0,
                "peak_bytes": self.peak, "peak_anon_bytes": self.peak_anon,
                "peak_growth_bytes": self.peak_growth, "budget_bytes": budget}


class RssSampler:
    """Background sampler. `pids` is a callable () -> {worker name: pid}."""

    def __init__(self, pids, period_s=0.5, proc_root="/proc"):
        self._pids = pids
        self.period_s = period_s
        self.proc_root = proc_root
        self.workers = {}
        self.pid_errors = 0
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()

    def sample_once(self):
        try:
            pids = self._pids()
        except Exception:            # pool busy failing over: try again next tick
            self.pid_errors += 1
            return
        for name, pid in pids.items():
            if pid is None:
                continue
            rss = read_rss(pid, self.proc_root)
            if rss is None:
                continue
            with self._lock:
                self.workers.setdefault(name, WorkerRss(name)).add(pid, rss)

    def start(self):
        self.sample_once()
        self._thread = threading.Thread(target=self._loop, name="stress-rss", daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(self.period_s):
            self.sample_once()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample_once()

    def summary(self, budget):
        with self._lock:
            return {name: w.summary(budget) for name, w in sorted(self.workers.items())}
