"""SequenceRunner: one Ray actor = one whole-model LLM whose MoE layers go to the shared ExpertWorkers.

Role in the data flow: the RunnerPool (runners.py) gives each runner a share of a job's requests
(`submit`); the runner holds the dense weights (mmap'd: one copy per machine in the page cache), its
own paged KV cache and `lanes` persistent generate.LLMEngines (the one generation loop), and an
ExpertClient that routes, balances and combines its MoE layers over the pool's workers (no central
actor on the token path). Requests are dealt to the lanes' engines (add_request, safe from the
actor's other threads while a lane steps); each lane steps its engine in its own thread while it has
work, under one `turn` lock that the ExpertClient releases while a layer's experts are away: lane
B's attention runs while lane A waits (two-batch overlap).
`poll` hands the driver, atomically per step, the tokens committed since the last poll and the
finished results, so a lost runner's requests resume elsewhere from their last committed token.
Served requests (output_kind DELTA, the HTTP server's, through runner_client.py) are streamed: `poll`
also hands every output of each since the last poll, in order ("outputs": the engine's own deltas),
and `abort` stops one (its KV blocks are freed at once, or after the in-flight step).

Bits: a request's logits depend only on its own tokens (row-wise ops, cb_expert_forward / cb_combine
in the workers and the client), and each request samples with its own RNG (seed from base_seed and
its global request id, one draw per token), so results equal LLM.generate in process whatever the
runner count, the lane split or a resume.
"""
import os
import threading
import time

from ..errors import InvalidArgument


class _LateMoe:
    """The LLM's `moe=` executor, bound to the ExpertClient once the LLM's engine exists."""

    client = None

    def moe_forward(self, layer, x):
        return self.client.moe_forward(layer, x)


class SequenceRunner:
    def __init__(self, path, index, cfg, workers, info, llm_kwargs=None, lanes=2, numa_node=None, n_runners=1):
        from ..model import LLM
        from .client import ExpertClient
        from .worker import _numa_pin
        self.index, self.path, self.lanes = int(index), str(path), int(lanes)
        # pinned like a worker (cfg.numa) before the LLM starts its threads, which inherit the CPUs
        self.numa_report, self.cpus = _numa_pin(self.index, n_runners, cfg.numa, numa_node)
        self.hooks = cfg.hooks
        moe = _LateMoe()
        moe.w8a8 = cfg.w8a8                   # the workers' arithmetic: LLM refuses an llm w8a8 that differs
        self.llm = LLM(path, moe=moe, **dict(dict(w8a8=cfg.w8a8), **dict(llm_kwargs or {})))
        self.client = ExpertClient(self.llm.executor, workers, cfg, info)
        moe.client = self.client
        self.turn = threading.Lock()          # held by a lane except while its experts are away
        self.client.turn = self.turn
        self.out_lock = threading.Condition()
        self.events, self.results, self.errors = [], {}, []
        self.engines = [self.llm.new_engine() for _ in range(max(1, self.lanes))]
        self.lanes = len(self.engines)
        self.lane_lock = threading.Lock()      # a lane's thread exits, or is started, under it
        self.active = [False] * self.lanes
        self.threads = []
        self.peak_lane_threads = 0             # most lane threads alive at once (<= lanes: issue 21 item 9)
        self._next_lane = 0
        self.kinds = {}                        # rid -> kind of the requests in the engines
        self.lane_of, self.streamed = {}, set()  # rid -> lane; rids whose every output is published
        self.outputs = {}                      # streamed rid -> its RequestOutputs (deltas) since the last poll
        self.tombstones = set()                # aborts that overtook their submit (threaded actor)
        self.served = self.tokens = 0
        self.steps = 0

    def ping(self):
        import ray
        return {"index": self.index, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

    # ------------------------------------------------------------------ work
    def submit(self, items):
        """items: [{"rid", "kind" ("generate"|"score"), "prompt", "params", "resume": (tokens, logprobs),
        "output_kind" (FINAL_ONLY: a job's, the default; DELTA: streamed)}].
        Returns at once; the lanes' threads step their engines."""
        from ..generate.outputs import failed_output
        from ..generate.params import RequestOutputKind
        final = RequestOutputKind.FINAL_ONLY
        failed = []
        for j, item in enumerate(items):
            lane, rid = (self._next_lane + j) % self.lanes, item["rid"]
            kind_out = RequestOutputKind(item.get("output_kind", final))
            stream = kind_out != final
            with self.out_lock:
                if rid in self.tombstones:       # aborted before it arrived
                    self.tombstones.discard(rid)
                    continue
                self.kinds[rid], self.lane_of[rid] = item["kind"], lane
                if stream:
                    self.streamed.add(rid)
            try:
                self.engines[lane].add_request(rid, item["prompt"], item["params"], kind=item["kind"],
                                               resume=item.get("resume"), output_kind=kind_out)
            except InvalidArgument as exc:
                self._forget(rid)
                failed.append(failed_output(rid, None, exc, item["kind"]))
                continue
            self.served += 1
            self._wake(lane)
        self._next_lane = (self._next_lane + len(items)) % self.lanes
        with self.out_lock:
            for r in failed:
                self.results[r.request_id] = r
            self.out_lock.notify_all()
        return self.lanes

    def abort(self, rids):
        """Stop these requests (served ones): their KV blocks are freed now or after the in-flight step."""
        for rid in rids:
            with self.out_lock:
                lane = self.lane_of.get(rid)
                if lane is None:
                    self.tombstones.add(rid)
                    continue
            if self.engines[lane].abort(rid):
                self._wake(lane)                 # the lane reports the abort (and frees) at its next step
        return True

    def _forget(self, rid):
        with self.out_lock:
            self.kinds.pop(rid, None)
            self.lane_of.pop(rid, None)
            self.streamed.discard(rid)

    def _wake(self, lane):
        with self.lane_lock:
            if not self.active[lane]:
                self.active[lane] = True
                t = threading.Thread(target=self._lane, args=(lane,), daemon=True)
                self.threads = [x for x in self.threads if x.is_alive()] + [t]
                t.start()
                self.peak_lane_threads = max(self.peak_lane_threads, len(self.threads))

    def _lane(self, lane):
        eng = self.engines[lane]
        try:
            while True:
                events = []
                with self.turn:
                    with self.lane_lock:
                        if not eng.has_unfinished():
                            self.active[lane] = False
                            return
                    outs = eng.step(lambda ev: events.append((ev.request_id, ev.token_id, ev.logprobs)))
                    self.steps += 1
                    self.tokens += len(events)
                self._publish(events, outs)
                if self.hooks.runner_step_delay_s:
                    time.sleep(self.hooks.runner_step_delay_s)
        except BaseException as exc:  # reported by poll(); the driver re-runs the lane's requests
            with self.out_lock:       # the error first: an inactive lane has published all it will (poll's busy)
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self.out_lock.notify_all()
            with self.lane_lock:
                self.active[lane] = False

    def _result(self, out):
        """A finished request as the driver wants it: a Score for score requests (as LLM.score)."""
        from ..generate.outputs import Score
        return Score.from_output(out) if self.kinds.pop(out.request_id, None) == "score" else out

    def _publish(self, events, outs):
        """A step's token events and outputs: a streamed request's outputs go to `outputs` (each a
        delta, kept in order), a job request's final one to `results`."""
        with self.out_lock:
            self.events.extend(e for e in events if e[0] not in self.streamed)   # jobs' resume record
            for o in outs:
                rid = o.request_id
                if rid in self.streamed:
                    self.outputs.setdefault(rid, []).append(o)
                elif o.finished:
                    self.results[rid] = self._result(o)
                if o.finished:
                    self.kinds.pop(rid, None)
                    self.lane_of.pop(rid, None)
                    self.streamed.discard(rid)
            self.out_lock.notify_all()

    def poll(self, wait_s=0.2):
        """{"events": [(rid, token, logprob)], "results": {rid: Completion|Score}, "outputs": {rid:
        [RequestOutput]} (streamed), "errors": [...], "busy": lanes still running}: everything since the
        last poll (waits up to wait_s for some)."""
        with self.out_lock:
            if not (self.events or self.results or self.errors or self.outputs):
                self.out_lock.wait(timeout=wait_s)
            with self.lane_lock:  # a lane goes inactive only after publishing its last outputs, so
                busy = sum(self.active)   # busy == 0 (counted before draining) means all is in this answer
            out = {"events": self.events, "results": self.results, "errors": self.errors, "busy": busy,
                   "outputs": self.outputs}
            self.events, self.results, self.errors, self.outputs = [], {}, [], {}
        return out

    def counters(self):
        with self.turn:
            self.client._poll_down(timeout=0)
            return self.client.counters()

    def stats(self):
        return {"index": self.index, "pid": os.getpid(), "steps": self.steps, "lanes": self.lanes,
                "peak_lane_threads": self.peak_lane_threads,
                "cpus": self.cpus, "numa": self.numa_report, "llm": self.llm.stats()}

    def serve_stats(self):
        """What the HTTP server's /metrics shows per runner: requests in its engines, tokens, KV and
        prefix-cache use (read between steps: no lock on the token path)."""
        st = self.llm.stats()
        return {"index": self.index, "running": sum(e.get_num_unfinished_requests() for e in self.engines),
                "served": self.served, "tokens": self.tokens, "steps": self.steps,
                "kv_cache": st["kv_cache"], "prefix_cache": st["prefix_cache"]}

    def close(self):
        self.llm.close()
        return True
