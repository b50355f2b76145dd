"""RunnerClient: the engine client (generate/client.py's submit / abort / poll) over M sequence runners.

Role in the data flow: the server's EngineBackend (through serving.py RunnerSet) and RunnerPool.generate/score
(runners.py) drive the runners (runner.py SequenceRunner actors) only through it:
    submit -> the least loaded live runner (fewest requests in flight; ties: the one given fewest so far),
              where the request stays until it ends; sent at the next poll, one submit per runner (its
              lanes take them together)
    abort  -> that runner's engine frees the request's KV blocks (a submit not sent yet is just dropped)
    poll   -> one long-poll in flight per runner with open requests; the outputs of the answers that came,
              as each request asked: DELTA (the runner engine's own deltas, in order) or FINAL_ONLY (its
              result; a Score for a score request)
A runner that dies: its DELTA requests (the server's) come back finished with error=EngineLost and it gets no
new requests; its FINAL_ONLY requests (a job's) continue on another live runner (or on the same actor once Ray
restarted it) from the tokens committed so far (the runner's events), with the bits they would have had
(deterministic sampling). A runner whose lane failed or whose submit raised: EngineLost for its DELTA requests,
PoolError from poll for its FINAL_ONLY ones.
"""
import threading

import ray

from ..errors import InvalidArgument, PoolError
from ..generate.client import DELTA, FINAL_ONLY, EngineLost, requests_fitting
from ..generate.outputs import failed_output
from .client import DEAD

POLL_WAIT_S = 0.5        # how long a runner's poll waits for something to report


class RunnerClient:
    def __init__(self, runners):
        """runners: the SequenceRunner actor handles (RunnerPool.runners)."""
        self.runners = runners
        self.n = self.engines = len(runners)
        self.lock = threading.Lock()
        self.dead = set()
        self.owner, self.items, self.committed = {}, {}, {}  # open rid -> runner, its submit item, (tokens, lps)
        self.pending = {}                  # runner -> items to send at the next poll
        self._polls = {}                   # poll ref -> runner index
        self._unchecked = []               # (runner, submit ref) not yet seen done
        self.sent = None                   # runner -> submit refs, when a caller keeps the record (RunnerPool)
        self.in_flight, self.routed, self.tokens_by = [0] * self.n, [0] * self.n, [0] * self.n
        self.resubmits = self.resumed_tokens = 0
        self.lost = []

    def live(self):
        return [i for i in range(self.n) if i not in self.dead]

    @property
    def alive(self):
        return bool(self.live())

    # ------------------------------------------------------------ the protocol
    def submit(self, request_id, prompt, params=None, output_kind=DELTA, kind="generate"):
        if request_id in self.owner:
            raise InvalidArgument(f"request {request_id!r}: a request with this id is already running")
        i = self._pick(self.live())
        if i is None:
            raise EngineLost("no sequence runner is alive")
        item = {"rid": request_id, "kind": kind, "prompt": prompt, "params": params, "output_kind": int(output_kind)}
        self.items[request_id] = item
        if output_kind == FINAL_ONLY and kind == "generate":
            self.committed[request_id] = ([], [])
        self._route(i, item)

    def abort(self, request_id):
        i = self._close(request_id)
        if i is None:
            return False
        share = self.pending.get(i, [])
        kept = [it for it in share if it["rid"] != request_id]
        if len(kept) < len(share):
            self.pending[i] = kept
        elif i not in self.dead:
            self.runners[i].abort.remote([request_id])
        return True

    def poll(self, timeout=None):
        """The outputs of the runners' answers within timeout (s; None: wait for one answer)."""
        self._flush()
        for i in {self.owner[rid] for rid in self.owner} - self.dead - set(self._polls.values()):
            self._polls[self.runners[i].poll.remote(POLL_WAIT_S)] = i
        got = self._submit_failures()
        if self._polls and not got:
            ready, _ = ray.wait(list(self._polls), num_returns=1, timeout=timeout)
            if ready:
                rest = [r for r in self._polls if r not in ready]
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0] if rest else []
            got = [(self._polls.pop(ref), self._get(ref)) for ref in ready]
        elif self.owner and not got:
            raise PoolError("RunnerClient: requests outstanding but no runner is working on them")
        outs = []
        for i, answer in got:
            self._take(i, answer, outs)
        return outs

    def running(self, sample_counts, max_num_seqs):
        """On each runner, the requests whose samples fit its max_num_seqs (generate/client.py)."""
        by_runner = {}
        for rid, n in sample_counts:
            if rid in self.owner:
                by_runner.setdefault(self.owner[rid], []).append(n)
        return sum(requests_fitting(ns, max_num_seqs) for ns in by_runner.values())

    def stats(self):
        """(LLM.stats()-shaped sums over the live runners + "runners": per-runner figures, None)."""
        runners = self.runner_stats()
        for r in runners:
            i = r["index"]
            r.update(requests_in_flight=self.in_flight[i], requests_routed=self.routed[i],
                     generation_tokens=self.tokens_by[i])
        alive = [r for r in runners if r.get("alive")]
        kv = {k: sum(r["kv_cache"][k] for r in alive) for k in ("blocks", "used_blocks")}
        q = sum((r["prefix_cache"] or {}).get("queried_tokens") or 0 for r in alive)
        h = sum((r["prefix_cache"] or {}).get("hit_tokens") or 0 for r in alive)
        return {"kv_cache": kv, "runners": runners,
                "prefix_cache": {"queried_tokens": q, "hit_tokens": h, "hit_rate": h / q if q else None}}, None

    def runner_stats(self, timeout=10.0):
        """[serve_stats of runner i, or {"index": i, "alive": False}] in runner order."""
        refs = {i: self.runners[i].serve_stats.remote() for i in self.live()}
        out = []
        for i in range(self.n):
            try:
                out.append(dict(ray.get(refs[i], timeout=timeout), alive=True) if i in refs else
                           {"index": i, "alive": False})
            except Exception as exc:
                out.append({"index": i, "alive": False, "error": str(exc)[:200]})
        return out

    def close(self):
        for rid in list(self.owner):
            self.abort(rid)

    def revive(self, timeout=5.0):
        """Runners marked dead that answer again (Ray restarted them) take requests again."""
        for i in sorted(self.dead):
            if self._ping(i, timeout):
                self.dead.discard(i)

    # ------------------------------------------------------------ routing
    def _pick(self, among):
        return min(among, key=lambda i: (self.in_flight[i], self.routed[i], i)) if among else None

    def _route(self, i, item):
        self.pending.setdefault(i, []).append(item)
        self.owner[item["rid"]] = i
        self.in_flight[i] += 1
        self.routed[i] += 1

    def _close(self, rid):
        """Forget an open request (finished, aborted or lost) -> the runner it was on, or None."""
        i = self.owner.pop(rid, None)
        self.items.pop(rid, None)
        self.committed.pop(rid, None)
        if i is not None:
            self.in_flight[i] -= 1
        return i

    def _flush(self):
        for i, share in self.pending.items():
            if share:
                ref = self.runners[i].submit.remote(share)
                self._unchecked.append((i, ref))
                if self.sent is not None:
                    self.sent.setdefault(i, []).append(ref)
        self.pending = {}

    # ------------------------------------------------------------ answers
    def _take(self, i, answer, outs, check_idle=True):
        if answer is None:
            return self._died(i, outs)
        for rid, token, lp in answer.get("events", ()):
            if rid in self.committed:
                self.committed[rid][0].append(token)
                self.committed[rid][1].append(lp)
        for rid, out in answer.get("results", {}).items():
            self._out(i, rid, out, outs)
        for rid, deltas in answer.get("outputs", {}).items():
            for out in deltas:
                self._out(i, rid, out, outs)
        if answer.get("errors"):
            self._failed(i, answer["errors"][0], outs)
        elif check_idle and answer.get("busy") == 0 and i in self.owner.values():
            self._check_idle(i, outs)

    def _out(self, i, rid, out, outs):
        if self.owner.get(rid) != i:
            return                                 # aborted meanwhile
        self.tokens_by[i] += sum(len(o.token_ids) for o in getattr(out, "outputs", ()))
        outs.append(out)
        if getattr(out, "finished", True):         # a Score is final
            self._close(rid)

    def _get(self, ref):
        try:
            return ray.get(ref)
        except DEAD:
            return None

    def _submit_failures(self):
        """[(runner, None if it died / {"errors": [...]} if its submit raised)] of the submits done so far."""
        got, keep = [], []
        for i, ref in self._unchecked:
            if not ray.wait([ref], timeout=0)[0]:
                keep.append((i, ref))
                continue
            try:
                ray.get(ref)
            except DEAD:
                got.append((i, None))
            except Exception as exc:
                got.append((i, {"errors": [f"{type(exc).__name__}: {exc}"]}))
        self._unchecked = keep
        return got

    def _check_idle(self, i, outs):
        """Runner i is idle with requests open: fine while a submit is still on its way; a failed submit
        is reported; every submit done and still idle after a fresh poll is a bug."""
        if any(k == i for k, _ in self._unchecked):
            for k, answer in self._submit_failures():
                self._take(k, answer, outs, check_idle=False)
            if any(k == i for k, _ in self._unchecked) or i not in self.owner.values():
                return
        self._take(i, ray.get(self.runners[i].poll.remote(0.0)), outs, check_idle=False)
        stuck = [rid for rid, k in self.owner.items() if k == i]
        if stuck and i not in self.pending:
            raise PoolError(f"runner {i} is idle but requests {stuck[:5]} are unfinished")

    def _failed(self, i, why, outs):
        rids = [rid for rid, k in self.owner.items() if k == i]
        if any(self.items[rid]["output_kind"] == FINAL_ONLY for rid in rids):
            raise PoolError(f"runner {i} failed: {why}")
        for rid in rids:
            self._lose(rid, i, f"sequence runner {i} failed: {why}", outs)

    def _lose(self, rid, i, text, outs):
        if i not in self.dead:
            self.runners[i].abort.remote([rid])
        self._close(rid)
        outs.append(failed_output(rid, None, EngineLost(text)))

    def _died(self, i, outs):
        """Runner i is gone: its DELTA requests are lost, its FINAL_ONLY ones continue elsewhere."""
        self.dead.add(i)
        self.lost.append(i)
        self.pending.pop(i, None)
        rids = [rid for rid, k in self.owner.items() if k == i]
        again = [rid for rid in rids if self.items[rid]["output_kind"] == FINAL_ONLY]
        for rid in rids:
            if rid not in again:
                self._lose(rid, i, f"sequence runner {i} died", outs)
        if again:
            live = [k for k in self.live() if self._ping(k)] or [i]
            self.dead -= set(live)                 # [i]: the same actor, once Ray restarted it
            for rid in again:
                self._resubmit(rid, live)

    def _resubmit(self, rid, live):
        """A dead runner's FINAL_ONLY request continues on the least loaded of `live` from its committed tokens."""
        item, committed = self.items[rid], self.committed.get(rid)
        self._close(rid)
        again = dict(item)
        if item["kind"] == "generate" and committed and committed[0]:
            toks, lps = committed
            again["resume"] = (list(toks), None if any(lp is None for lp in lps) else list(lps))
            self.resumed_tokens += len(toks)
        self.items[rid] = item             # a later resume is made from the original and every token committed
        if committed is not None:
            self.committed[rid] = committed
        self.resubmits += 1
        self._route(self._pick(live), again)

    def _ping(self, i, timeout=5.0):
        try:
            ray.get(self.runners[i].ping.remote(), timeout=timeout)
            return True
        except Exception:
            return False
