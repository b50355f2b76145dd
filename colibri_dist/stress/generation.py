"""The generation workload of `colibri stress`: whole-model requests through the pool while workers are
SIGKILLed and experts hot-added and removed; every completion checked bit for bit.

Role in the data flow:
    demo LLM (or `model:`) hard-linked twice: <out>/pool/ and <out>/ref/
    -> Ray (worker fault hooks) + Pool(workers, cache_bytes = budget, offload_dir, max_restarts)
    -> cd.LLM(<out>/pool/model.colibri, moe=pool)           the LLM under test (its experts on the pool)
    -> cd.LLM(<out>/ref/model.colibri)                      the in-process reference (all resident)
    driver thread: waves of `requests_per_wave` requests (greedy, and every third one sampled with its own
                   seed) -> llm.generate -> ref.generate -> compare token ids, text, finish reason and
                   logprobs exactly; count each request id once (lost: missing or failed; duplicated)
    main thread, every 0.1 s: kill_worker (faults.py), hot_add / hot_remove on the pool's table
A hot-added expert's router row points against the mean router direction, so the demo language never
routes to it (its own expert's logit is positive, the others' are ~0, the new one's is negative): the
pool's expert table (ids, compact index, version) changes under running requests, and any leak of that
into routing or expert ids shows up as a mismatch against the reference, which never sees the change.
A removed expert is always one this run added.
"""
import os
import threading
import time

import numpy as np

from . import report as report_mod
from .faults import SETTLE_S, Injectors
from .harness import HOOK, _stop_on_signals
from .probe import PoolProbe
from .reference import new_expert_weights, stage_models, stress_pool_args, worker_budget
from .schedule import FaultSchedule, specs_from_events
from .settings import as_plain, enabled_events
from .worker_hooks import CONTROL_ENV, set_slow_source

KINDS = ("kill_worker", "hot_add", "hot_remove")     # what this workload injects (other kinds are ignored)


class GenerationStress:
    def __init__(self, cfg, out_dir, duration_s=None, max_requests=None, log=print):
        self.cfg, self.s = cfg, cfg.stress
        self.out = os.path.abspath(out_dir)
        self.duration_s = float(duration_s if duration_s is not None else self.s.duration_s)
        self.max_requests = max_requests
        self.log = log
        self.rng = np.random.default_rng([self.s.seed, 12])
        self.stop = threading.Event()
        self.lock = threading.Lock()                 # table events vs each other (not vs requests)
        self.interrupted = None
        self.seen, self.mismatches, self.lost, self.duplicated = {}, [], [], 0
        self.requests = self.tokens = self.waves = 0
        self.records, self.pending, self.table_errors = [], [], []
        self.added = {}                              # layer -> ids this run added (and not removed)
        self.hot_adds = self.hot_removes = 0
        self.pool = self.ray = self.llm = self.ref = None

    # ---------------------------------------------------------------- set-up
    def _model_source(self):
        if self.cfg.model:
            return self.cfg.model
        from ..demos.llm_cache import ensure_demo_llm
        return ensure_demo_llm(self.cfg.demo_llm, log=self.log).model

    def setup(self):
        from ..front import open_pool
        from ..model import LLM
        from ..testing import cluster as testing_cluster
        self.pool_model_path, ref_path, self.table, self.expert_bytes = stage_models(self._model_source(), self.out)
        p = self.cfg.pool
        self.budget = worker_budget(p, self.s.cache_fraction, self.expert_bytes)
        self.offload_dir = p.offload_dir or os.path.join(self.out, "offload")
        os.makedirs(self.offload_dir, exist_ok=True)
        self.control_dir = os.path.join(self.out, "control")
        set_slow_source(self.control_dir, 0)
        self.ray = testing_cluster.start(1, None, env={CONTROL_ENV: self.control_dir}, setup_hook=HOOK)
        self.pool = open_pool(stress_pool_args(self.cfg, self.pool_model_path, self.budget, self.offload_dir,
                                               self.ray.worker_resources(p.workers), self.s.worker_max_restarts))
        self.probe = PoolProbe(self.pool)
        self.llm = LLM(self.pool_model_path, threads=1, moe=self.pool, max_num_seqs=self.s.requests_per_wave)
        self.ref = LLM(ref_path, threads=1, max_num_seqs=self.s.requests_per_wave)
        self.injectors = Injectors(self)

    # ---------------------------------------------------------------- what faults.py asks of its context
    def worker_pids(self, fresh=False):
        return self.probe.pids(fresh=fresh)

    # ---------------------------------------------------------------- requests
    def _wave(self, n):
        from ..generate import SamplingParams
        from ..demos import llm as demo_llm
        rows = demo_llm.prompts(n, seed=int(self.s.seed) * 100003 + self.waves, max_tokens=self.s.max_tokens)
        ids = [f"w{self.waves:05d}-{i:03d}" for i in range(n)]
        params = [SamplingParams(max_tokens=self.s.max_tokens, temperature=0, logprobs=1) if i % 3 else
                  SamplingParams(max_tokens=self.s.max_tokens, temperature=0.9, seed=self.waves * 1000 + i,
                                 logprobs=1) for i in range(n)]
        return ids, [r["prompt"] for r in rows], params

    def run_wave(self):
        n = self.s.requests_per_wave
        if self.max_requests is not None:
            n = min(n, self.max_requests - self.requests)
            if n <= 0:
                self.stop.set()
                return
        ids, prompts, params = self._wave(n)
        self.waves += 1
        try:
            got = self.llm.generate(prompts, params, request_ids=ids, use_tqdm=False, errors="return")
        except Exception as exc:                    # the pool gave up mid-wave: every request of it is lost
            self.lost += [(i, f"{type(exc).__name__}: {exc}") for i in ids]
            self.log(f"stress: wave {self.waves} failed: {type(exc).__name__}: {exc}")
            return
        want = self.ref.generate(prompts, params, request_ids=ids, use_tqdm=False, errors="return")
        self._check(ids, got, want)

    def _check(self, ids, got, want):
        returned = [c.request_id for c in got]
        for rid in returned:
            self.seen[rid] = self.seen.get(rid, 0) + 1
            self.duplicated += self.seen[rid] > 1
        for rid in set(ids) - set(returned):
            self.lost.append((rid, "no completion returned"))
        for g, w in zip(got, want):
            self.requests += 1
            if g.error is not None:
                self.lost.append((g.request_id, str(g.error)))
                continue
            self.tokens += len(g.token_ids)
            if not same_completion(g, w):
                self.mismatches.append(g.request_id)
                self.log(f"stress: MISMATCH {g.request_id}: {g.token_ids} vs reference {w.token_ids}")

    def _drive_requests(self):
        while not self.stop.is_set():
            self.run_wave()

    # ---------------------------------------------------------------- table events and faults
    def _fire(self, event, now):
        if event.kind in ("hot_add", "hot_remove"):
            with self.lock:
                try:
                    self._hot_add(event) if event.kind == "hot_add" else self._hot_remove(event)
                except Exception as exc:
                    self.table_errors.append(f"{event.kind} at {now:.1f}s: {type(exc).__name__}: {exc}")
                    self.log(f"stress: {self.table_errors[-1]}")
            return
        rec = self.injectors.inject(event, now)
        self.records.append(rec)
        if rec.injected:
            rec.settle_from, rec.damage_at = time.monotonic(), self._damage()
            rec.batches_at_clear = self.requests
            self.pending.append(rec)
            self.log(f"stress: {now:6.1f}s injected {event.kind} {rec.detail}")

    def _hot_add(self, event):
        layer = self.table.layers[event.seq % len(self.table.layers)]
        router = self.table.routers[layer]
        weights, _ = new_expert_weights(self.rng, self.table.hidden, self.table.inter, 1.0)
        mean = router.astype(np.float64).mean(axis=0)
        row = (-4.0 * np.sqrt(self.table.hidden) * mean / max(np.linalg.norm(mean), 1e-12)).astype(np.float32)
        new = int(self.pool.add_expert(layer, weights, row))
        self.added.setdefault(layer, []).append(new)
        self.hot_adds += 1

    def _hot_remove(self, event):
        layers = [l for l, ids in self.added.items() if ids]
        if not layers:
            return
        layer = layers[event.seq % len(layers)]
        e = self.added[layer].pop(0)
        self.pool.remove_expert(layer, e)
        self.hot_removes += 1

    def _damage(self):
        return (len(self.mismatches), len(self.lost), self.duplicated)

    def _verify_due(self, final=False):
        for rec in list(self.pending):
            if self.requests < rec.batches_at_clear + self.s.requests_per_wave and not final:
                continue
            ok = self.injectors.verify(rec)
            waited = time.monotonic() - rec.settle_from
            if ok is None and not final and waited < SETTLE_S:
                continue
            self.pending.remove(rec)
            rec.checks["requests_after"] = self.requests - rec.batches_at_clear
            rec.checks["no_damage_since_injection"] = self._damage() == rec.damage_at
            rec.recovered = bool(ok and rec.checks["no_damage_since_injection"] and rec.checks["requests_after"] > 0)
            self.log(f"stress: {rec.kind} #{rec.seq} {'recovered' if rec.recovered else 'NOT recovered'}")

    # ---------------------------------------------------------------- the run
    def run(self):
        t = time.monotonic()
        try:
            self.setup()
            with _stop_on_signals(self):
                rep = self._drive(time.monotonic() - t)
        finally:
            self.teardown()
        path = report_mod.write_report(rep, self.out)
        self.log(f"stress: report written to {path}")
        return rep

    def _drive(self, setup_s):
        events = [(k, spec) for k, spec in enabled_events(self.s) if k in KINDS]
        ignored = sorted({k for k, _ in enabled_events(self.s)} - set(KINDS))
        tail = min(10.0, 0.25 * self.duration_s)
        schedule = FaultSchedule(specs_from_events(events), horizon_s=self.duration_s - tail)
        driver = threading.Thread(target=self._drive_requests, name="stress-requests", daemon=True)
        t0 = time.monotonic()
        driver.start()
        while not self.stop.is_set() and time.monotonic() - t0 < self.duration_s:
            now = time.monotonic() - t0
            for event in schedule.due(now):
                if event.kind == "kill_worker" and any(r.kind == "kill_worker" for r in self.pending):
                    continue                                 # one worker down at a time
                self._fire(event, now)
            self._verify_due()
            self.stop.wait(0.1)
        deadline = time.monotonic() + SETTLE_S
        while self.pending and time.monotonic() < deadline and not self.interrupted:
            self._verify_due()                               # the driver keeps sending waves meanwhile
            time.sleep(0.2)
        self.stop.set()
        driver.join()
        elapsed = time.monotonic() - t0
        self._verify_due(final=True)
        return self._report(elapsed, setup_s, ignored)

    def _report(self, elapsed, setup_s, ignored):
        faults = [r for r in self.records if r.injected]
        unrecovered = [r.as_dict() for r in faults if not r.recovered]
        passed = (not self.mismatches and not self.lost and not self.duplicated and not unrecovered
                  and not self.table_errors and not self.interrupted and self.requests > 0)
        by_kind = lambda recs: {k: sum(r.kind == k for r in recs) for k in sorted({r.kind for r in recs})}  # noqa: E731
        return {"workload": "generation", "passed": passed, "exit_code": 0 if passed else 1,
                "requests": self.requests, "waves": self.waves, "tokens": self.tokens,
                "elapsed_s": round(elapsed, 2), "tokens_per_s": round(self.tokens / elapsed, 1) if elapsed else None,
                "mismatches": len(self.mismatches), "mismatched_requests": self.mismatches[:20],
                "lost_requests": len(self.lost), "lost": [list(x) for x in self.lost[:20]],
                "duplicated_requests": self.duplicated,
                "faults_injected": by_kind(faults), "faults_recovered": by_kind([r for r in faults if r.recovered]),
                "faults_unrecovered": unrecovered, "faults": [r.as_dict() for r in self.records],
                "faults_ignored": ignored, "hot_adds": self.hot_adds, "hot_removes": self.hot_removes,
                "table_errors": self.table_errors, "interrupted": self.interrupted,
                "pool": {k: self.probe.stats(fresh=True).get(k) for k in ("retries", "batches", "version")},
                "run": {"out": self.out, "model": self.pool_model_path, "expert_bytes": self.expert_bytes,
                        "budget_per_worker": self.budget, "workers": self.cfg.pool.workers,
                        "setup_s": round(setup_s, 2), "duration_s": self.duration_s, "config": as_plain(self.cfg)}}

    def teardown(self):
        for closer in (lambda: self.llm and self.llm.close(), lambda: self.ref and self.ref.close(),
                       lambda: self.pool and self.pool.shutdown(), lambda: self.ray and self.ray.shutdown()):
            try:
                closer()
            except Exception as exc:
                self.log(f"stress: teardown: {type(exc).__name__}: {exc}")


def same_completion(a, b):
    """Bit for bit: token ids, text, finish reason and every logprob (floats compared exactly)."""
    if (list(a.token_ids), a.text, a.finish_reason) != (list(b.token_ids), b.text, b.finish_reason):
        return False
    la = [lp.to_dict() for lp in (a.logprobs or [])]
    lb = [lp.to_dict() for lp in (b.logprobs or [])]
    return la == lb


def run_generation_stress(cfg, out_dir, duration_s=None, max_requests=None, log=print):
    """Run the generation stress workload; returns the report dict (also <out_dir>/report.json)."""
    return GenerationStress(cfg, out_dir, duration_s, max_requests, log).run()
