"""Continuous batching over a step model: admission, chunked prefill, preemption, stop conditions.

Role in the data flow: the engine (engine.py) adds Requests and removes aborted ones; each of its steps
is vLLM's split: `schedule()` decides ONE batched model call (a StepPlan)
that mixes the decode tokens of running sequences with prefill chunks of waiting ones, under
`max_num_batched_tokens` and `max_num_seqs`, checking KV blocks before scheduling anything; the engine
runs the model on it; `update(plan, logits)` samples, checks stops and frees finished sequences. When
blocks run out the NEWEST running sequence is preempted (released, requeued at the front of the
waiting queue) and later recomputed from prompt + tokens generated so far. Otherwise FIFO.
Because a sequence's logits depend only on its own history and each request samples with its own
RNG, a request's tokens and logprobs are the same bits whatever else is scheduled with it.

StepModel protocol (duck-typed; the whole-model engine provides it):
    vocab_size: int; max_seq_len: int; eos_token_ids: tuple; block_size: int
    free_blocks() -> int                 KV blocks currently free
    blocks_needed(seq, n_new) -> int     blocks seq needs to append n_new tokens (seq None = new)
    new_sequence() -> seq                an opaque handle with an empty cache
    release(seq) -> None                 frees its blocks
    forward([(seq, token_ids, want_all), ...]) -> [float32 [len(token_ids) or 1, vocab], ...]
    forward_trusted(steps)               optional: forward of the plan's steps without re-checking them (the
                                         engine calls it when there: they come from checked requests)
    match_prefix(seq, token_ids) -> int  optional (prefix caching): gives the new seq the cached KV of
                                         the first tokens (whole blocks, never the last token); the
                                         request's prefill then starts there
    prefix_digests(token_ids) -> list    optional: names of those full blocks (a waiting request whose
                                         blocks are being computed in this step waits one step)
    fork_sequence(seq) -> seq            optional: a new seq with seq's KV (n > 1: the samples of one
                                         prompt compute it once)
"""
import time
from collections import deque
from dataclasses import dataclass

from ..errors import InvalidArgument, NumericalError
from .outputs import StepStats


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 2048   # tokens per model call (decode tokens + prefill chunks)
    max_num_seqs: int = 64               # sequences holding a KV cache at once
    prefill_chunk_size: int | None = None  # most prompt tokens of one sequence per step (None = budget)
    base_seed: int = 0                   # seeds of requests without one derive from this and their id
    max_logprobs: int = 20               # the most logprobs / prompt_logprobs a request may ask (vLLM's)

    def __post_init__(self):
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidArgument(f"SchedulerConfig.{name} must be an integer >= 1, got {v!r}")
        c = self.prefill_chunk_size
        if c is not None and (not isinstance(c, int) or isinstance(c, bool) or c < 1):
            raise InvalidArgument(f"SchedulerConfig.prefill_chunk_size must be None or an integer >= 1, got {c!r}")
        if not isinstance(self.base_seed, int) or isinstance(self.base_seed, bool):
            raise InvalidArgument(f"SchedulerConfig.base_seed must be an integer, got {self.base_seed!r}")
        m = self.max_logprobs
        if not isinstance(m, int) or isinstance(m, bool) or m < 0:
            raise InvalidArgument(f"max_logprobs must be an integer >= 0, got {m!r}", parameter="max_logprobs", value=m)


@dataclass
class StepPlan:
    """What schedule() decided for one model call (update() applies its logits)."""
    batch: list                          # [(request, n_tokens)] in the model call's order
    failed: list                         # requests failed while scheduling (too big for the KV cache, ...)
    t0: float                            # when scheduling began (StepStats.t_start)
    preempted: int                       # the preemption count before it
    decode: int = 0                      # tokens of the batch that are one running sequence's next token
    prefill: int = 0                     # the others (prompt chunks, recomputation after a preemption)

    def model_inputs(self):
        """The model.forward argument: [(seq, token ids, want every position's logits)]."""
        return [(r.seq, r.pending(n), r.want_all()) for r, n in self.batch]

    def start_masks(self):
        """Start the batched next-token masks of the constrained sequences that sample in this step (their
        last pending token is fed now), computed while the model runs; -> a Future, or None when none does."""
        slots = []
        for r, n in self.batch:
            procs = r.procs
            if procs is None or procs.grammar is None or r.kind == "score" or r.computed + n < r.num_tokens():
                continue
            slot = procs.grammar
            if slot.matcher is not None and slot.after is None:
                slots.append(slot)
        return slots[0].grammars.start_fill(slots) if slots else None


class Scheduler:
    """The batch of one engine: a FIFO waiting queue and the running list (oldest first). Only the
    engine's driving thread calls it (the engine's lock serializes adds and aborts into it)."""

    def __init__(self, model, config=None):
        self.model, self.cfg = model, config or SchedulerConfig()
        self.waiting, self.running = deque(), []
        self.stats = {"steps": 0, "prefill_tokens": 0, "decode_tokens": 0, "preemptions": 0,
                      "max_running": 0, "max_batch_tokens": 0, "failed": 0,
                      "cached_tokens": 0}
        self._failed_now = []

    def add(self, req):
        self.waiting.append(req)

    def remove(self, req):
        """Drop a request wherever it is; its KV blocks are freed now."""
        if req.seq is not None:
            self.model.release(req.seq)
            req.seq = None
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)

    def has_work(self):
        return bool(self.waiting or self.running)

    def clear(self):
        """Release every running sequence and drop every request (after an exception in a step)."""
        for r in list(self.running) + list(self.waiting):
            self.remove(r)

    def schedule(self):
        """-> StepPlan: the requests of the next model call and their token counts (running sequences first,
        then admissions, under the token and KV budgets), and the requests that failed while scheduling. When
        nothing can run and a request waits for its constraint's compile, it waits for it a little first (the
        caller's loop does not spin). The caller runs model.forward(plan.model_inputs()), then update()."""
        t0, preempted = time.perf_counter(), self.stats["preemptions"]
        self._failed_now = []
        plan = StepPlan([], [], t0, preempted)
        self._schedule(plan)
        plan.failed = list(self._failed_now)
        if not plan.batch:
            self._wait_for_grammar()
        return plan

    def update(self, plan, outs, on_token=None, on_step=None):
        """Apply the model's logits of plan's batch: sample, check stops, free finished sequences; -> the
        requests that progressed (the plan's failed ones first). on_step(StepStats) after it (not for an
        empty plan: no model call)."""
        sched = plan.batch
        if not sched:
            return list(plan.failed)
        if len(outs) != len(sched):
            raise InvalidArgument(f"model.forward returned {len(outs)} results for {len(sched)} steps")
        self._count(plan)
        progressed = list(plan.failed)
        for (r, n), logits in zip(sched, outs):
            before = len(r.output)
            done = self._advance(r, n, logits, on_token)
            if before == 0 and r.output and r.seq is not None:
                progressed += self._fork_siblings(r, logits, on_token)
            if done:
                self.running.remove(r)
                self.model.release(r.seq)
                r.seq = None
                progressed.append(r)
            elif len(r.output) > before:
                progressed.append(r)
        if on_step is not None:
            done = sum(r.finished for r in progressed)
            on_step(StepStats(plan.t0, time.perf_counter(), plan.prefill, plan.decode, len(self.running),
                              len(self.waiting), self.model.free_blocks(), done,
                              self.stats["preemptions"] - plan.preempted))
        return progressed

    def _advance(self, r, n, logits, on_token):
        """r.advance; a fault of this request's own sampling (a processor on its parameters) fails it alone,
        never its neighbours in the step. Numerical faults, interrupts and the caller's own on_token callback
        raising still end the step (the caller's call fails, as before)."""
        theirs = []

        def callback(event):
            try:
                return on_token(event)
            except BaseException as exc:
                theirs.append(exc)
                raise
        try:
            return r.advance(n, logits, self.model, None if on_token is None else callback)
        except (NumericalError, InvalidArgument):
            raise
        except Exception as exc:
            if theirs:
                raise
            return r.fail(exc)

    def _count(self, plan):
        """Add the step's tokens to the totals."""
        st = self.stats
        st["steps"] += 1
        st["decode_tokens"] += plan.decode
        st["prefill_tokens"] += plan.prefill
        st["max_running"] = max(st["max_running"], len(self.running))
        st["max_batch_tokens"] = max(st["max_batch_tokens"], plan.prefill + plan.decode)

    def _chunk(self, r, budget):
        n = min(r.num_pending(), budget)
        return min(n, self.cfg.prefill_chunk_size) if self.cfg.prefill_chunk_size else n

    def _schedule(self, plan):
        """Fill plan.batch [(request, n_tokens)]: running sequences first (oldest first), then admissions
        (FIFO, when nothing was preempted)."""
        budget, reserved, preempted = self.cfg.max_num_batched_tokens, 0, False
        free = self.model.free_blocks()        # changes only when a preemption releases blocks
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            n = self._chunk(r, budget)
            need = self.model.blocks_needed(r.seq, n)
            while need > free - reserved:
                if i == 0 and len(self.running) == 1:
                    self._fail_too_big(r, need)
                    self.running.pop()
                    break
                victim = self.running.pop()
                self._preempt(victim)
                preempted, free = True, self.model.free_blocks()
                if victim is r:
                    break
            if i >= len(self.running) or self.running[i] is not r:
                break                          # r itself was preempted or failed: nothing after it
            reserved += need
            _add(plan, r, n)
            budget -= n
            i += 1
        if not preempted and self.waiting:
            self._admit(plan, budget, reserved)

    def _admit(self, plan, budget, reserved):
        """FIFO admissions, except requests that wait for a prompt being computed now: a sibling sample
        (n > 1) until its sample 0 has computed the prompt (then it forks it, _fork_siblings), and, with
        prefix caching, a prompt whose full blocks another sequence computes in this step (it matches
        them in the next one, so co-admitted rows compute a shared prefix once)."""
        inflight = self._inflight(plan.batch)
        i = 0
        while i < len(self.waiting) and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            r = self.waiting[i]
            if self._waits_for_sibling(r) or (inflight and not inflight.isdisjoint(self._digests(r))) \
                    or not _grammar_ready(r):
                i += 1
                continue
            if not self._start_grammar(r):
                del self.waiting[i]
                continue
            self._start(r)
            n = self._chunk(r, budget)
            need = self.model.blocks_needed(r.seq, n)
            if need > self.model.free_blocks() - reserved:
                self.model.release(r.seq)
                r.seq, r.computed = None, 0
                if self.running:
                    return                     # FIFO: wait for blocks rather than skip ahead
                del self.waiting[i]
                self._fail_too_big(r, need)
                continue
            del self.waiting[i]
            if inflight is not None:
                inflight.update(self._digests(r)[r.computed // self.model.block_size:])
            self.stats["cached_tokens"] += r.computed
            if r.t_sched is None:
                r.t_sched = time.perf_counter()
            self.running.append(r)
            reserved += need
            _add(plan, r, n)
            budget -= n

    def _inflight(self, sched):
        """Digests of the full prompt blocks the sequences scheduled so far have yet to commit (None
        without prefix caching)."""
        if getattr(self.model, "prefix_digests", None) is None or not getattr(self.model, "prefix_caching", True):
            return None
        out = set()
        for r, _ in sched:
            if r.computed < len(r.prompt) - 1 and r.prompt_k is None:
                out.update(self._digests(r)[r.computed // self.model.block_size:])
        return out

    def _digests(self, r):
        """The chain digests of r's full prompt blocks (cached on r, checked by the first one: a new
        salt renames every block)."""
        if r.prompt_k is not None or len(r.prompt) <= self.model.block_size:
            return []
        first = self.model.prefix_digests(r.prompt[:self.model.block_size + 1])
        got = getattr(r, "_digests", None)
        if got is None or got[:1] != first:
            got = r._digests = self.model.prefix_digests(r.prompt)
        return got

    def _waits_for_sibling(self, r):
        """A sample i > 0 not yet started while its sample 0 still computes the prompt (forking needs
        the model's fork_sequence)."""
        if r.sample_index == 0 or r.output or getattr(self.model, "fork_sequence", None) is None:
            return False
        first = r.group.children[0]
        return not first.finished and not first.output

    def _fork_siblings(self, r, logits, on_token):
        """r (sample 0) just computed its prompt: its waiting siblings take a fork of its KV (full blocks
        shared, the partial one copied) and sample their first token from the same logits row. -> the
        siblings that got a token."""
        fork = getattr(self.model, "fork_sequence", None)
        group = getattr(r, "group", None)
        if fork is None or group is None or len(group.children) < 2 or r.sample_index != 0:
            return []
        out = []
        for c in group.children[1:]:
            if c.seq is not None or c.output or c.finished or c not in self.waiting:
                continue
            if len(self.running) >= self.cfg.max_num_seqs or self.model.free_blocks() < 1:
                break                          # admitted later the usual way (prefix cache, or recompute)
            self.waiting.remove(c)
            c.seq, c.computed = fork(r.seq), len(r.prompt)
            c.t_sched = c.t_sched or time.perf_counter()
            self.stats["cached_tokens"] += c.computed
            if c.advance(0, logits[-1:], self.model, on_token):
                self.model.release(c.seq)
                c.seq = None
            else:
                self.running.append(c)
            out.append(c)
        return out

    def _start(self, r):
        """A new sequence for r; with prefix caching its prefill starts after the cached full blocks
        (not for requests that need every prompt position's logits: score, prompt_logprobs)."""
        r.seq, r.computed = self.model.new_sequence(), 0
        match = getattr(self.model, "match_prefix", None)
        if match is not None and r.prompt_k is None:
            r.computed = match(r.seq, r.prompt + r.output)

    def _start_grammar(self, r):
        """Start r's structured-output matcher (its compile is done); a constraint that did not compile fails
        r alone, naming the field. -> False when r failed."""
        slot = _slot(r)
        if slot is None:
            return True
        try:
            slot.start()
            return True
        except InvalidArgument as exc:
            r.fail(exc)
            self._failed_now.append(r)
            self.stats["failed"] += 1
            return False

    def _wait_for_grammar(self):
        """Nothing could be scheduled: when a request waits for its constraint's compile, wait for it a
        little (instead of the caller's loop spinning)."""
        slot = next((_slot(r) for r in self.waiting if not _grammar_ready(r)), None)
        if slot is not None:
            slot.wait(0.05)

    def _preempt(self, r):
        self.model.release(r.seq)
        r.reset_cache()
        self.waiting.appendleft(r)
        self.stats["preemptions"] += 1

    def _fail_too_big(self, r, need):
        if r.seq is not None:
            self.model.release(r.seq)
        r.seq = None
        r.fail(InvalidArgument(f"request {r.request_id!r}: needs {need} more KV blocks at {r.num_tokens()} tokens "
                               f"but only {self.model.free_blocks()} are free with nothing else running "
                               f"(the KV cache budget is too small for this request)"))
        self._failed_now.append(r)
        self.stats["failed"] += 1


def _add(plan, r, n):
    """Put n tokens of r in the plan, counted as decode when they are a sampling sequence's one next token."""
    plan.batch.append((r, n))
    if n == 1 and r.kind != "score" and r.computed >= r.n_prompt and r.num_pending() == 1:
        plan.decode += 1
    else:
        plan.prefill += n


def _slot(r):
    procs = r.procs
    return None if procs is None else procs.grammar


def _grammar_ready(r):
    slot = _slot(r)
    return slot is None or slot.ready()
