"""The stress run: set up, drive the streams, fire the faults, check, stop, report.

Role in the data flow:
    config -> model (given or generated demo) hard-linked twice: <out>/pool/ and <out>/ref/
           -> offload filesystem at <out>/offload, Ray with the worker fault hooks, Pool, Reference
    streams (threads): next batch -> pool.moe_forward per layer -> reference -> ledger
    main thread: every tick, fire due events (faults; hot-add/remove under the table write lock),
                 clear faults whose duration ended, verify faults once enough batches followed
    stop after duration_s or max_batches -> report.json (report.py)
"""
import os
import signal
import threading
import time

import numpy as np

from . import report as report_mod
from .accounting import TokenLedger
from .faults import SETTLE_S, Injectors
from .offload_fs import make_offload_fs
from .probe import PoolProbe
from .reference import Reference, new_expert_weights, stage_models, stress_pool_args, worker_budget
from .rss import RssSampler
from .schedule import TABLE_KINDS, FaultSchedule, specs_from_events
from .settings import as_plain, enabled_events
from .table_lock import TableLock
from .worker_hooks import CONTROL_ENV, set_slow_source
from .workload import JobStream

HOOK = "colibri_dist.stress.worker_hooks.install"
PROCESS_FAULTS = ("kill_worker", "remove_node")   # one at a time: the next waits until the last settled
BUDGET_LIMIT = 0.10         # the bar: RAM budget at most 10% of the expert bytes


class Harness:
    def __init__(self, cfg, out_dir, duration_s=None, max_batches=None, log=print):
        self.cfg, self.s = cfg, cfg.stress
        self.out = os.path.abspath(out_dir)
        self.duration_s = float(duration_s if duration_s is not None else self.s.duration_s)
        self.max_batches = max_batches if max_batches is not None else self.s.max_batches
        self.log = log
        self.rng = np.random.default_rng([self.s.seed, 7])
        self.ledger = TokenLedger()
        self.lock = TableLock()
        self.stop = threading.Event()
        self.interrupted = None
        self.batches = 0
        self._count_lock = threading.Lock()
        self.records, self.pending, self.active, self.deferred = [], [], [], []
        self.table_errors = []
        self.pool = self.ray = self.reference = self.offload_fs = self.rss = None

    # ---------------------------------------------------------------- set-up
    def _model_source(self):
        if self.cfg.model:
            return self.cfg.model
        from ..demos.classifier import ensure_demo
        return ensure_demo(self.cfg.demo, log=self.log).model

    def setup(self):
        self.pool_model_path, ref_path, self.table, self.expert_bytes = stage_models(self._model_source(), self.out)
        p = self.cfg.pool
        self.n_workers = p.workers
        self.budget = worker_budget(p, self.s.cache_fraction, self.expert_bytes)
        self.offload_dir = p.offload_dir or os.path.join(self.out, "offload")
        self.offload_fs = make_offload_fs(self.offload_dir, self.s.offload_fs, self.s.offload_fs_bytes, log=self.log)
        self.control_dir = os.path.join(self.out, "control")
        self.slow_source_ms = self.s.slow_source_ms
        set_slow_source(self.control_dir, 0)
        self._start_pool()
        self.reference = Reference(ref_path)
        self.probe = PoolProbe(self.pool)
        self.rss = RssSampler(self.probe.pids, period_s=self.s.rss_period_s).start()
        self.injectors = Injectors(self)

    def _start_pool(self):
        from ..front import open_pool
        from ..testing import cluster as testing_cluster
        c = self.s.cluster
        self.ray = testing_cluster.start(c.nodes, c.cpus_per_node if c.nodes > 1 else None,
                                         env={CONTROL_ENV: self.control_dir}, setup_hook=HOOK)
        self.cluster = self.ray if c.nodes > 1 else None
        self.pool = open_pool(stress_pool_args(self.cfg, self.pool_model_path, self.budget, self.offload_dir,
                                               self.ray.worker_resources(self.cfg.pool.workers),
                                               self.s.worker_max_restarts))

    # ---------------------------------------------------------------- fault context (faults.py uses these)
    def worker_pids(self, fresh=False):
        return self.probe.pids(fresh=fresh)

    def checksum_failures(self):
        return sum(int(c.get("checksum_failures", 0)) for c in self.probe.cache_stats_per_process().values())

    def max_load_ms_p99(self):
        self.probe.stats(fresh=True)
        return max([float((c.get("load_ms") or {}).get("p99", 0.0))
                    for c in self.probe.cache_stats_per_process().values()] or [0.0])

    def segments_version(self):
        from ..store.segments import Segments
        return Segments(self.pool_model_path).version

    def reopened_table(self):
        """{layer: (added, removed)} as a fresh open of the pool's segment directory shows it."""
        from ..store.segments import Segments
        seg = Segments(self.pool_model_path)
        return {l: (seg.added(l), sorted(seg.removed(l))) for l in self.table.layers
                if seg.added(l) or seg.removed(l)}

    # ---------------------------------------------------------------- streams
    def _stream_loop(self, stream):
        while not self.stop.is_set():
            if not self.run_one_batch(stream):
                break

    def run_one_batch(self, stream):
        with self.lock.read():
            batch = stream.next_batch()
            self.ledger.submit(batch.token_ids)
            layers = sorted(batch.inputs)
            try:
                outs = [self.pool.moe_forward(l, batch.inputs[l]) for l in layers]
            except Exception as exc:               # the pool gave up: the batch's tokens are lost
                self.ledger.fail(batch.token_ids, exc)
                self.log(f"stress: batch {stream.stream}:{batch.seq} failed: {type(exc).__name__}: {exc}")
                return not self.stop.is_set()
            refs = [self.reference.forward(l, batch.inputs[l]) for l in layers]
            self.ledger.check(batch.token_ids, outs, refs)
        with self._count_lock:
            self.batches += 1
            done = self.max_batches is not None and self.batches >= self.max_batches
        if done:
            self.stop.set()
        return True

    # ---------------------------------------------------------------- table events
    def _table_event(self, event, now):
        layer = self.table.layers[event.seq % len(self.table.layers)]
        with self.lock.write():
            try:
                if event.kind == "hot_add":
                    self._hot_add(layer)
                else:
                    self._hot_remove(layer)
            except Exception as exc:
                self.table_errors.append(f"{event.kind} layer {layer} at {now:.1f}s: {type(exc).__name__}: {exc}")
                self.log(f"stress: {self.table_errors[-1]}")

    def _hot_add(self, layer):
        router = self.table.routers[layer]
        scale = float(np.linalg.norm(router, axis=1).mean())
        weights, row = new_expert_weights(self.rng, self.table.hidden, self.table.inter, scale)
        pool_id = int(self.pool.add_expert(layer, weights, row))
        ref_id = self.reference.add_expert(layer, weights, row)
        if pool_id != ref_id:
            raise RuntimeError(f"pool gave the hot-added expert id {pool_id}, the reference {ref_id}")
        self.table.record_add(layer, ref_id, row)

    def _hot_remove(self, layer):
        live = self.table.live[layer]
        keep = max(self.table.top_k + 2, len(live) // 2)
        if len(live) <= keep:
            return
        added = [e for e in self.table.added[layer] if e in live]
        pick = added if added and self.rng.random() < 0.5 else live
        e = int(pick[int(self.rng.integers(len(pick)))])
        self.pool.remove_expert(layer, e)
        self.reference.remove_expert(layer, e)
        self.table.record_remove(layer, e)

    # ---------------------------------------------------------------- faults
    def _damage(self):
        led = self.ledger
        return (led.mismatches, led.lost, led.duplicated, len(led.errors))

    def _fire_due(self, events, now):
        """Fire due events; a process fault waits while an earlier one has not settled (a pool with
        every worker down at once has nothing to fail over to: that is an outage, not a fault test)."""
        waiting, self.deferred = self.deferred + list(events), []
        for event in waiting:
            busy = any(r.kind in PROCESS_FAULTS for r in self.pending)
            if event.kind in PROCESS_FAULTS and busy:
                self.deferred.append(event)
            else:
                self._fire(event, now)

    def _fire(self, event, now):
        if event.kind in TABLE_KINDS:
            self._table_event(event, now)
            return
        try:
            rec = self.injectors.inject(event, now)
        except Exception as exc:
            from .faults import FaultRecord
            rec = FaultRecord(event.kind, event.seq, round(now, 3), injected=True)
            rec.detail = {"inject_error": f"{type(exc).__name__}: {exc}"}
            rec.recovered = False
        self.records.append(rec)
        if not rec.injected or rec.recovered is False:
            self.log(f"stress: {event.kind} #{event.seq} at {now:.1f}s: "
                     f"{rec.skipped or rec.detail.get('inject_error')}")
            return
        rec.damage_at = self._damage()
        self.log(f"stress: {now:6.1f}s injected {event.kind} #{event.seq} {rec.detail}")
        if event.duration_s > 0:
            self.active.append((now + event.duration_s, rec))
        else:
            self._to_verify(rec, now)

    def _to_verify(self, rec, now):
        rec.batches_at_clear = self.batches
        rec.settle_from = time.monotonic()
        self.pending.append(rec)

    def _clear_due(self, now, force=False):
        for item in list(self.active):
            end, rec = item
            if force or now >= end:
                self.active.remove(item)
                self.injectors.clear(rec)
                rec.cleared_at_s = round(now, 3)
                self._to_verify(rec, now)

    def _verify_due(self, force=False, final=False):
        need = 2 * self.s.streams
        for rec in list(self.pending):
            if force or self.batches >= rec.batches_at_clear + need:
                self._verify(rec, final)

    def _verify(self, rec, final):
        try:
            ok = self.injectors.verify(rec)
        except Exception as exc:
            rec.checks["verify_error"] = f"{type(exc).__name__}: {exc}"
            ok = False
        waited = time.monotonic() - rec.settle_from
        if ok is None and not final and waited < SETTLE_S:
            return                                    # e.g. a worker still restarting: next tick
        self.pending.remove(rec)
        if ok is None:
            rec.checks["settle_timeout_s"] = round(waited, 1)
        rec.checks["batches_after"] = self.batches - rec.batches_at_clear
        clean = self._damage() == rec.damage_at
        rec.checks["no_damage_since_injection"] = clean
        rec.recovered = bool(ok and clean and rec.checks["batches_after"] > 0)
        self.log(f"stress: {rec.kind} #{rec.seq} {'recovered' if rec.recovered else 'NOT recovered'} {rec.checks}")

    # ---------------------------------------------------------------- the run
    def run(self):
        t_setup = time.monotonic()
        try:
            self.setup()
            setup_s = time.monotonic() - t_setup
            with _stop_on_signals(self):
                rep = self._drive(setup_s)
        finally:
            self.teardown()
        path = report_mod.write_report(rep, self.out)
        self.log(f"stress: report written to {path}")
        return rep

    def _drive(self, setup_s):
        tail = min(10.0, 0.25 * self.duration_s)
        schedule = FaultSchedule(specs_from_events(enabled_events(self.s)), horizon_s=self.duration_s - tail)
        streams = [JobStream(i, self.table.snapshot, self.s.batch_tokens, self.s.zipf_s, self.s.shift_every,
                             self.s.noise, seed=self.s.seed) for i in range(self.s.streams)]
        threads = [threading.Thread(target=self._stream_loop, args=(st,), name=f"stress-stream-{st.stream}",
                                    daemon=True) for st in streams]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        while not self.stop.is_set():
            now = time.monotonic() - t0
            if now >= self.duration_s:
                break
            self._fire_due(schedule.due(now), now)
            self._clear_due(now)
            self._verify_due()
            self.stop.wait(0.1)
        self.stop.set()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        self._clear_due(elapsed, force=True)
        deadline = time.monotonic() + SETTLE_S
        while self.pending and time.monotonic() < deadline:   # batches until the last faults settle
            for st in streams:
                self.run_one_batch(st)
            self._verify_due(force=True)
        self._verify_due(force=True, final=True)
        self.ledger.close()
        return self._report(elapsed, schedule, setup_s)

    def _report(self, elapsed, schedule, setup_s):
        self.rss.stop()
        final = self.probe.stats(fresh=True)
        per_proc = self.probe.cache_stats_per_process()
        cache = report_mod.sum_stats([{k: c[k] for k in report_mod.COUNTERS if k in c} for c in per_proc.values()])
        run_info = {"out": self.out, "model": self.pool_model_path, "expert_bytes": self.expert_bytes,
                    "budget_fraction": self.budget * self.n_workers / self.expert_bytes,
                    "budget_within_limit": self.budget * self.n_workers <= BUDGET_LIMIT * self.expert_bytes,
                    "workers": self.n_workers, "offload_fs": self.offload_fs.kind, "setup_s": round(setup_s, 2),
                    "duration_s": self.duration_s, "max_batches": self.max_batches,
                    "table": self.table.summary(), "table_errors": self.table_errors,
                    "pool": {k: final.get(k) for k in ("retries", "batches", "tokens", "version")},
                    "ledger_errors": len(self.ledger.errors), "config": as_plain(self.cfg)}
        rep = report_mod.build_report(
            ledger=self.ledger, batches=self.batches, elapsed_s=elapsed, faults=[r for r in self.records if r.injected],
            planned=schedule.planned(), rss=self.rss.summary(self.budget), rss_slack_bytes=self.s.rss_slack,
            cache_stats=cache, budget=self.budget, run_info=run_info)
        rep["faults_skipped"] = [r.as_dict() for r in self.records if not r.injected]
        rep["faults_deferred_unfired"] = [{"kind": e.kind, "seq": e.seq, "at_s": e.at_s} for e in self.deferred]
        rep["cache_stats_per_worker_process"] = per_proc
        rep["interrupted"] = self.interrupted
        if self.table_errors or self.interrupted:
            rep["passed"], rep["exit_code"] = False, 1
        return rep

    def teardown(self):
        for closer in (lambda: self.rss and self.rss.stop(),
                       lambda: self._clear_due(0, force=True),
                       lambda: set_slow_source(self.control_dir, 0) if hasattr(self, "control_dir") else None,
                       lambda: self.pool and self.pool.shutdown(),
                       lambda: self.ray and self.ray.shutdown(),
                       lambda: self.reference and self.reference.close(),
                       lambda: self.offload_fs and self.offload_fs.close()):
            try:
                closer()
            except Exception as exc:
                self.log(f"stress: teardown: {type(exc).__name__}: {exc}")


class _stop_on_signals:
    """SIGINT/SIGTERM end the run early but cleanly: streams stop, faults are cleared, the offload
    fs is unmounted, Ray is shut down, and report.json says `interrupted` (and fails)."""

    def __init__(self, harness):
        self.harness = harness
        self.saved = {}

    def _handler(self, signum, frame):
        self.harness.interrupted = signal.Signals(signum).name
        self.harness.stop.set()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.saved[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, old in self.saved.items():
            signal.signal(sig, old)


def run_stress(cfg, out_dir, duration_s=None, max_batches=None, log=print):
    """Run one stress job; returns the report dict (also written to <out_dir>/report.json)."""
    return Harness(cfg, out_dir, duration_s, max_batches, log).run()
