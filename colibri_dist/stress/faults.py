"""Fault injectors of the stress run: break one thing on purpose, then say whether it came back.

Role in the data flow: the harness hands each due FaultEvent to `inject`, calls
`clear` when a fault with a duration ends, and `verify` once enough batches
have completed after it. A fault is recovered when no batch answered after it
was injected lost, duplicated or changed a token (the harness checks that for
all faults alike) and the kind's own check below passes:

  corrupt_spill     flip bytes in the payload of a spill file (<offload>/worker-*/colibri-spill-*/L*-E*.spill);
                    check: none (detection is counted from checksum_failures when the file is read again)
  enospc            fill the offload filesystem with a ballast file for duration_s, then delete it
  slow_source       every worker's source reads sleep slow_source_ms for duration_s (worker_hooks)
  kill_worker       SIGKILL one worker process (pid from pool.stats()); check: the pool reports that
                    worker again under a new, live pid
  remove_node       remove a raylet that hosts workers (multi-raylet runs), then add a fresh one;
                    check: every worker is live again
  truncate_segment  leave what a crash mid hot-add leaves: a truncated segment under the next
                    segment name and a half-written temp file; check: reopening the segment
                    directory gives exactly the committed table (what the reference has)
"""
import glob
import os
import signal
from dataclasses import asdict, dataclass, field

from . import worker_hooks

SETTLE_S = 60.0           # how long a killed worker or removed node may take to come back


@dataclass
class FaultRecord:
    kind: str
    seq: int
    at_s: float
    injected: bool = False
    skipped: str = None             # why a fault could not be injected (then it is not counted)
    detail: dict = field(default_factory=dict)
    cleared_at_s: float = None
    recovered: bool = None
    checks: dict = field(default_factory=dict)
    damage_at: tuple = None         # ledger (mismatches, lost, duplicated, errors) when injected
    batches_at_clear: int = None
    settle_from: float = None       # monotonic time the harness started waiting for recovery

    def as_dict(self):
        return {k: v for k, v in asdict(self).items() if v is not None and k not in ("damage_at", "settle_from")}


class Injectors:
    """All injectors over one run context (the harness): ctx gives pool, paths, rng and helpers."""

    def __init__(self, ctx):
        self.ctx = ctx

    def inject(self, event, now_s):
        rec = FaultRecord(event.kind, event.seq, round(now_s, 3))
        if now_s - event.at_s > 0.5:
            rec.detail["planned_at_s"] = event.at_s      # deferred behind an earlier process fault
        getattr(self, f"_inject_{event.kind}")(rec, event)
        return rec

    def clear(self, rec):
        fn = getattr(self, f"_clear_{rec.kind}", None)
        if fn is not None:
            fn(rec)

    def verify(self, rec):
        """True (the kind's check passed), False (failed) or None (not settled yet: ask again)."""
        fn = getattr(self, f"_verify_{rec.kind}", None)
        return True if fn is None else fn(rec)

    # ---------------------------------------------------------------- corrupt_spill
    def _inject_corrupt_spill(self, rec, event):
        files = sorted(glob.glob(os.path.join(self.ctx.offload_dir, "**", "L*-E*.spill"), recursive=True))
        files = [f for f in files if os.path.getsize(f) > 4096]
        if not files:
            rec.skipped = "no spill file on disk yet"
            return
        path = files[int(self.ctx.rng.integers(len(files)))]
        size = os.path.getsize(path)
        offset = 4096 + int(self.ctx.rng.integers(size - 4096))
        with open(path, "r+b") as f:
            f.seek(offset)
            old = f.read(16)
            f.seek(offset)
            f.write(bytes(b ^ 0xA5 for b in old))
        rec.injected = True
        rec.detail.update({"file": os.path.relpath(path, self.ctx.offload_dir), "offset": offset,
                      "bytes": len(old), "checksum_failures_before": self.ctx.checksum_failures()})

    def _verify_corrupt_spill(self, rec):
        rec.checks["checksum_failures_after"] = self.ctx.checksum_failures()
        return True

    # ---------------------------------------------------------------- enospc
    def _inject_enospc(self, rec, event):
        fs = self.ctx.offload_fs
        if not fs.can_fill:
            rec.skipped = f"offload dir is a plain directory ({fs.kind}): cannot be filled safely"
            return
        taken = fs.fill()
        rec.injected = True
        rec.detail.update(ballast_bytes=taken, free_bytes_after_fill=fs.free_bytes(), fs=fs.kind)

    def _clear_enospc(self, rec):
        self.ctx.offload_fs.clear()
        rec.detail["free_bytes_after_clear"] = self.ctx.offload_fs.free_bytes()

    def _verify_enospc(self, rec):
        return rec.detail.get("free_bytes_after_clear", 0) > 0

    # ---------------------------------------------------------------- slow_source
    def _inject_slow_source(self, rec, event):
        worker_hooks.set_slow_source(self.ctx.control_dir, self.ctx.slow_source_ms)
        rec.injected = True
        rec.detail["delay_ms"] = self.ctx.slow_source_ms

    def _clear_slow_source(self, rec):
        worker_hooks.set_slow_source(self.ctx.control_dir, 0)

    def _verify_slow_source(self, rec):
        rec.checks["load_ms_p99_max"] = self.ctx.max_load_ms_p99()
        return True

    # ---------------------------------------------------------------- kill_worker
    def _inject_kill_worker(self, rec, event):
        pids = self.ctx.worker_pids(fresh=True)
        if not pids:
            rec.skipped = "pool.stats() reported no worker pid"
            return
        names = sorted(pids)
        name = names[event.seq % len(names)]
        pid = pids[name]
        stale = sorted(glob.glob(os.path.join(self.ctx.offload_dir, name, "colibri-spill-*")))
        os.kill(pid, signal.SIGKILL)
        rec.injected = True
        rec.detail.update(worker=name, pid=pid, spill_dirs=[os.path.basename(d) for d in stale])

    def _verify_kill_worker(self, rec):
        name, old = rec.detail["worker"], rec.detail["pid"]
        pids = self._live_pids()
        new = pids.get(name)
        if new in (None, old) or not _alive(new):
            return None                       # not back yet: the harness asks again until its deadline
        rec.checks["new_pid"] = new
        rec.checks["stale_spill_bytes_removed"] = self._remove_stale_spill(name, rec.detail["spill_dirs"])
        return True

    def _live_pids(self):
        try:
            return self.ctx.worker_pids()
        except Exception:
            return {}

    def _remove_stale_spill(self, name, dirs):
        """A SIGKILLed worker leaves its spill directory behind (its restarted process makes a new
        one): delete the dead process's directory, as an operator would, so the offload fs does
        not fill up over a long run. Returns the bytes removed."""
        removed = 0
        for d in dirs:
            path = os.path.join(self.ctx.offload_dir, name, d)
            for f in glob.glob(os.path.join(path, "*")):
                try:
                    removed += os.path.getsize(f)
                    os.unlink(f)
                except OSError:
                    pass
            try:
                os.rmdir(path)
            except OSError:
                pass
        return removed

    # ---------------------------------------------------------------- remove_node
    def _inject_remove_node(self, rec, event):
        cluster = self.ctx.cluster
        if cluster is None:
            rec.skipped = "not a multi-raylet run"
            return
        pids = self.ctx.worker_pids(fresh=True)
        dirs = {name: sorted(os.path.basename(d) for d in
                             glob.glob(os.path.join(self.ctx.offload_dir, name, "colibri-spill-*"))) for name in pids}
        removed = cluster.remove_worker_node(list(pids.values()), event.seq)
        if removed is None:
            rec.skipped = "no removable node hosts a worker"
            return
        rec.injected = True
        rec.detail.update(removed, workers={n: dirs[n] for n, p in pids.items() if p in removed["pids"]})

    def _verify_remove_node(self, rec):
        lost = set(rec.detail.get("pids", []))
        pids = self._live_pids()
        if len(pids) < self.ctx.n_workers or lost & set(pids.values()) or not all(map(_alive, pids.values())):
            return None
        rec.checks["workers_live"] = True
        rec.checks["stale_spill_bytes_removed"] = sum(
            self._remove_stale_spill(n, d) for n, d in rec.detail["workers"].items())
        rec.checks["node_added_back"] = self.ctx.cluster.add_node()
        return True

    # ---------------------------------------------------------------- truncate_segment
    def _inject_truncate_segment(self, rec, event):
        from ..store.segments import segments_dir
        seg_dir = segments_dir(self.ctx.pool_model_path)
        os.makedirs(seg_dir, exist_ok=True)
        layer = self.ctx.table.layers[event.seq % len(self.ctx.table.layers)]
        version = self.ctx.segments_version()
        next_id = self.ctx.table.routers[layer].shape[0]
        name = f"seg-{version + 1:06d}-L{layer}-E{next_id}.bin"
        donor = sorted(glob.glob(os.path.join(seg_dir, "seg-*.bin")))
        head = open(donor[-1], "rb").read(4096 + 1000) if donor else b"CBSEG001" + b"\0" * 600
        keep = max(8, len(head) * 2 // 3)
        for path in (os.path.join(seg_dir, name), os.path.join(seg_dir, ".tmp-stress-crash")):
            with open(path, "wb") as f:
                f.write(head[:keep])
        rec.injected = True
        rec.detail.update(segment=name, kept_bytes=keep, layer=layer, version_before=version)

    def _verify_truncate_segment(self, rec):
        got = self.ctx.reopened_table()
        want = self.ctx.table.committed()
        rec.checks["reopened_equals_reference"] = got == want
        if got != want:
            rec.checks["reopened"], rec.checks["expected"] = str(got), str(want)
        return got == want


def _alive(pid):
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, TypeError):
        return False
    except PermissionError:
        return True
    return True
