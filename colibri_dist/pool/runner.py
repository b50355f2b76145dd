"""SequenceRunner: one Ray actor = one whole-model LLM whose MoE layers go to the shared ExpertWorkers.

Role in the data flow: the RunnerPool (runners.py) gives each runner a share of a job's requests
(`submit`); the runner holds the dense weights (mmap'd: one copy per machine in the page cache), its
own paged KV cache and schedulers, and an ExpertClient that routes, balances and combines its MoE
layers over the pool's workers (no central actor on the token path). Its `lanes` schedulers split
its share and step in their own threads under one `turn` lock that the ExpertClient releases while
a layer's experts are away: lane B's attention runs while lane A waits (two-batch overlap).
`poll` hands the driver, atomically per step, the tokens committed since the last poll and the
finished results, so a lost runner's requests resume elsewhere from their last committed token.

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
        self.llm = LLM(path, moe=moe, **dict(llm_kwargs or {}))
        self.client = ExpertClient(self.llm.engine, workers, cfg, info)
        moe.client = self.client
        self.turn = threading.Lock()          # held by a lane except while its experts are away
        self.client.turn = self.turn
        self.out_lock = threading.Condition()
        self.events, self.results, self.errors = [], {}, []
        self.threads = []
        self.steps = 0

    def ping(self):
        import ray
        return {"index": self.index, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

    # ------------------------------------------------------------------ work
    def submit(self, items):
        """items: [{"rid", "kind" ("generate"|"score"), "prompt", "params", "resume": (tokens, logprobs)}].
        Returns at once; the lanes run in threads."""
        from ..generate.scheduler import Scheduler
        lanes = [Scheduler(self.llm, self.llm.scheduler_config, self.llm.tokenizer)
                 for _ in range(max(1, min(self.lanes, len(items))))]
        owners = [{} for _ in lanes]          # per lane: scheduler index -> rid
        for j, item in enumerate(items):
            lane = j % len(lanes)
            owners[lane][self._add(lanes[lane], item)] = item["rid"]
        for sched, rids in zip(lanes, owners):
            t = threading.Thread(target=self._lane, args=(sched, rids), daemon=True)
            t.start()
            self.threads.append(t)
        return len(lanes)

    def _add(self, sched, item):
        from ..generate.api import encode_prompt
        from ..generate.outputs import Completion, Score
        from ..generate.params import SamplingParams
        rid, kind = item["rid"], item["kind"]
        ids, err = encode_prompt(self.llm.tokenizer, item["prompt"], rid, add_special_tokens=True)
        params = None
        if err is None and kind == "generate":
            try:
                params = SamplingParams.from_dict(item["params"])
            except InvalidArgument as exc:
                err = InvalidArgument(f"request {rid!r}: {exc}")
        if err is not None:
            return sched.fail((Score if kind == "score" else Completion)(ids or [], error=err, request_id=rid))
        if kind == "score":
            return sched.add_score(ids, rid)
        index = sched.add_generate(ids, params, rid)
        if item.get("resume"):
            _resume(sched.requests[index], *item["resume"])
        return index

    def _lane(self, sched, rids):
        try:
            for req in sched.requests:           # requests that failed validation are done already
                if req.result is not None:
                    self._publish([], [req])
            while True:
                events = []
                with self.turn:
                    if not sched.has_work():
                        break
                    done = sched.step(lambda ev: events.append(self._event(sched, rids, ev)))
                    self.steps += 1
                self._publish(events, done)
                if self.hooks.runner_step_delay_s:
                    time.sleep(self.hooks.runner_step_delay_s)
        except BaseException as exc:  # reported by poll(); the driver re-runs the lane's requests
            with self.out_lock:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self.out_lock.notify_all()

    @staticmethod
    def _event(sched, rids, ev):
        req = sched.requests[ev.index]
        lp = req.logprobs[-1] if req.params.logprobs > 0 and req.logprobs else None
        return (rids[ev.index], ev.token_id, lp)

    def _publish(self, events, done):
        with self.out_lock:
            self.events.extend(events)
            for r in done:
                self.results[r.result.request_id] = r.result
            self.out_lock.notify_all()

    def poll(self, wait_s=0.2):
        """{"events": [(rid, token, logprob)], "results": {rid: Completion|Score}, "errors": [...],
        "busy": lanes still running}: everything since the last poll (waits up to wait_s for some)."""
        with self.out_lock:
            if not (self.events or self.results or self.errors):
                self.out_lock.wait(timeout=wait_s)
            self.threads = [t for t in self.threads if t.is_alive()]
            busy = len(self.threads)  # counted before draining: busy == 0 means all is in this answer
            out = {"events": self.events, "results": self.results, "errors": self.errors, "busy": busy}
            self.events, self.results, self.errors = [], {}, []
        return out

    def counters(self):
        with self.turn:
            self.client._poll_down(timeout=0)
            return self.client.counters()

    def stats(self):
        return {"index": self.index, "pid": os.getpid(), "steps": self.steps, "lanes": self.lanes,
                "cpus": self.cpus, "numa": self.numa_report, "llm": self.llm.stats()}

    def close(self):
        self.llm.close()
        return True


def _resume(req, tokens, logprobs):
    """Continue a request from its last committed token: the same output so far, its RNG advanced by
    one draw per token (the sampler's contract), its detokenizer fed; the KV cache is rebuilt by the
    scheduler's prefill of prompt + output (chunking never changes bits)."""
    for t in tokens:
        req.sampler.rng.random()
        req.output.append(int(t))
        req.detok.add(int(t))
    if logprobs is not None and req.params.logprobs > 0:
        req.logprobs = list(logprobs)
    req.streamed = max(0, len(req.detok.text) - req.holdback)
    req.t_first = req.t_first or time.perf_counter()
