"""One memory cgroup per expert worker of the pool stage, and what each worker process did inside it.

Role: WorkerGroups(n, limit) makes n MemoryLimit groups (limits.py) of `limit` bytes; join(pids) moves each
running worker process into its own group by writing its pid to the group's cgroup.procs (cgroup v1), after
asking the group to move the process's charges along (memory.move_charge_at_immigrate = 3; Linux 6.x refuses
it, so what the process held before joining stays charged where it was: the stage joins the workers before
they touch any expert, and the group counts the experts they fault in from then on). facts(path) reads, per
worker, /proc/<pid>/cgroup (is it still in its group), /proc/<pid>/smaps (how much of the model file is
resident in its mappings) and the group's usage, peak, failcnt and OOM kills; reads() the bytes each worker
has read from storage (/proc/<pid>/io read_bytes). close() moves any worker still alive back to the group it
came from, keeps the groups' last counters (final) and removes the groups, also on failure.
"""
import os
import re

from .limits import ROOT, MemoryLimit

_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def memory_cgroup(pid):
    """The memory cgroup of a process ('/colibri-scale-pool-...'), from /proc/<pid>/cgroup."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "memory" in controllers.split(","):
                return path
    return None


def read_bytes(pid):
    """Bytes the process has caused to be read from storage (/proc/<pid>/io read_bytes; pid may be 'self')."""
    with open(f"/proc/{pid}/io") as f:
        return int(next(line for line in f if line.startswith("read_bytes:")).split()[1])


def resident_bytes(pid, path):
    """Bytes of the file `path` resident in the process's mappings (the Rss of its /proc/<pid>/smaps entries)."""
    real, total, inside = os.path.realpath(path), 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if _MAPPING.match(line):
                parts = line.rstrip("\n").split(None, 5)
                inside = len(parts) == 6 and parts[5] == real
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


class WorkerGroups:
    def __init__(self, n, limit_bytes):
        self.limit, self.groups, self.pids, self.origins = int(limit_bytes), [], [], []
        try:
            for i in range(n):
                self.groups.append(MemoryLimit(limit_bytes, name=f"colibri-scale-pool-{os.getpid()}-{i}"))
        except BaseException:
            self.close()
            raise
        self.move_charge = self.groups[0].move_charges() if self.groups else None
        for g in self.groups[1:]:
            g.move_charges()

    def names(self):
        return ["/" + os.path.basename(g.dir) for g in self.groups]

    def join(self, pids):
        """Worker i's process into group i; returns where each was and is now."""
        if len(pids) != len(self.groups):
            raise ValueError(f"{len(pids)} worker pids for {len(self.groups)} groups")
        for pid, g in zip(pids, self.groups):
            self.origins.append(memory_cgroup(pid))
            self.pids.append(int(pid))
            g.join(pid)
        return [{"pid": p, "from": o, "now": memory_cgroup(p)} for p, o in zip(self.pids, self.origins)]

    def reads(self):
        return {f"worker {i}": read_bytes(p) for i, p in enumerate(self.pids)}

    def facts(self, path):
        """Per worker now: pid, its memory cgroup, inside its group, the model file's resident bytes, the group's
        counters."""
        out = []
        for pid, g, name in zip(self.pids, self.groups, self.names()):
            now = memory_cgroup(pid)
            out.append({"pid": pid, "cgroup": now, "in_group": now == name,
                        "resident_model_bytes": resident_bytes(pid, path), "group": g.counters()})
        return out

    def removed(self):
        return not any(os.path.exists(g.dir) for g in self.groups)

    def close(self):
        """Workers still alive go back to where they came from; the groups' last counters stay in self.final (an
        OOM kill shows there when the stage failed); then every group is removed."""
        self.final = [g.counters() for g in self.groups]
        for pid, origin, name in zip(self.pids, self.origins, self.names()):
            try:
                if memory_cgroup(pid) == name:           # still ours (not exited, pid not reused)
                    with open(os.path.join(ROOT, (origin or "/").lstrip("/"), "cgroup.procs"), "w") as f:
                        f.write(str(pid))
            except OSError:                              # exited meanwhile, or its old group is gone
                pass
        for g in self.groups:
            g.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
