"""One sequence's state inside the engine: tokens, cache position, sampler, processors, detokenizer.

Role in the data flow: the engine creates one Request per sample of an added request (n of them for
SamplingParams.n), the scheduler moves it between its waiting queue and running list and feeds it
the model's logits (`advance`); the engine reads its CompletionOutput (and prompt logprobs) into
RequestOutputs. Preemption (`reset_cache`) drops only the KV position; the sampled tokens, the
processors' counts and the RNG state stay, so the recomputed sequence continues exactly where it was.
"""
import math
import time

from ..errors import InvalidArgument
from .detok import NullDetokenizer
from .grammar import DEAD_END, GrammarDeadEnd
from .outputs import CompletionOutput, RequestMetrics, StreamEvent
from .sampler import NonFiniteLogits, logsumexp, token_logprobs
from .safe_text import DecodeFailed


class Request:
    def __init__(self, index, request_id, kind, prompt, params=None, sampler=None, detok=None, procs=None,
                 sample_index=0):
        self.index, self.request_id, self.kind, self.sample_index = index, request_id, kind, sample_index
        self.prompt = prompt
        self.n_prompt = len(prompt)           # the prompt never changes (preemption recomputes it)
        self.params, self.sampler, self.procs = params, sampler, procs
        self.detok = detok or NullDetokenizer()
        self.output, self.logprobs, self.prompt_lps = [], [], []
        self.cum_lp = 0.0
        self.sent_tokens = self.sent_chars = 0   # what DELTA outputs already carried
        self.prompt_k = 0 if kind == "score" else (params.prompt_logprobs if params is not None else None)
        self.seq, self.computed = None, 0
        self.streamed = 0                     # characters of text already streamed
        self.holdback = max((len(s) for s in params.stop), default=1) - 1 \
            if params and not params.include_stop_str_in_output else 0
        self.finished, self.finish_reason, self.stop_reason, self.error, self.final_text = False, None, None, None, None
        self.t_added, self.t_sched, self.t_first, self.t_done = time.perf_counter(), None, None, None
        self.preemptions = 0

    def num_tokens(self):
        return self.n_prompt + len(self.output)

    def num_pending(self):
        return self.n_prompt + len(self.output) - self.computed

    def pending(self, n):
        """The next n tokens to feed: tokens[computed:computed + n] of prompt + output."""
        c, p = self.computed, len(self.prompt)
        if c >= p:
            return self.output[c - p:c - p + n]
        head = self.prompt[c:c + n]
        return head + self.output[:n - len(head)] if len(head) < n else head

    def want_all(self):
        """Does the next chunk need the logits of every position (prompt logprobs still to collect)?"""
        return self.prompt_k is not None and self.computed < len(self.prompt) - 1

    def reset_cache(self):
        self.seq, self.computed = None, 0
        self.prompt_lps = []
        self.preemptions += 1

    def metrics(self):
        return RequestMetrics(self.t_added, self.t_sched, self.t_first, self.t_done, self.preemptions)

    def resume(self, tokens, logprobs=None):
        """Continue from tokens generated elsewhere (a lost pool runner's last committed ones): the same
        output so far, the RNG advanced by one draw per token (the sampler's contract), processors and
        detokenizer fed; the scheduler's prefill of prompt + output rebuilds the KV cache."""
        for t in tokens:
            self.sampler.rng.random()
            self.output.append(int(t))
            if self.procs is not None:
                self.procs.accept(int(t))
            self.detok.add(int(t))
        if logprobs is not None and self.params.logprobs is not None:
            self.logprobs = list(logprobs)
            self.cum_lp = float(sum(lp.logprob for lp in self.logprobs))
        self.streamed = max(0, len(self.detok.text) - self.holdback)
        self.t_first = self.t_first or time.perf_counter()

    # ------------------------------------------------------------ outputs
    def completion_output(self, delta=False):
        """Everything so far, or (delta) what is new since the last delta output."""
        text = self.final_text if self.finished and self.final_text is not None else self.detok.text[:self.streamed]
        t0, c0 = (self.sent_tokens, self.sent_chars) if delta else (0, 0)
        if delta:
            self.sent_tokens, self.sent_chars = len(self.output), len(text)
        want_lp = self.params.logprobs is not None
        return CompletionOutput(self.sample_index, text[c0:], self.output[t0:], self.cum_lp if want_lp else None,
                                self.logprobs[t0:] if want_lp else None, self.finish_reason, self.stop_reason)

    def finish(self, reason=None, stop_reason=None, text=None, error=None):
        self.finished, self.finish_reason, self.stop_reason, self.error = True, reason, stop_reason, error
        self.final_text = text if text is not None else self.detok.text[:self.streamed]
        self.t_done = time.perf_counter()

    def fail(self, exc):
        """Finish with an error naming this request (the scheduler releases its blocks); a numerical fault
        keeps its class (NonFiniteLogits), anything else becomes InvalidArgument."""
        if str(exc).startswith("request ") and isinstance(exc, (InvalidArgument, NonFiniteLogits)):
            error = exc
        elif isinstance(exc, NonFiniteLogits):
            error = NonFiniteLogits(f"request {self.request_id!r}: {exc}")
        else:
            error = InvalidArgument(f"request {self.request_id!r}: {exc}", parameter=getattr(exc, "parameter", None))
        self.finish(error=error)
        return True

    # ------------------------------------------------------------ after a forward
    def advance(self, n, logits, model, on_token):
        """Account n fed tokens with their logits; return True when the request is finished."""
        start = self.computed
        self.computed += n
        if self.prompt_k is not None and start < len(self.prompt) - 1 and self._collect_prompt(start, n, logits):
            return True
        if self.kind == "score":
            if self.computed >= len(self.prompt):
                self.finish()
            return self.finished
        if self.computed < self.num_tokens():
            return False                      # mid-prompt chunk: its logits are not needed
        try:
            token, lp = self.sampler.sample(logits[-1], self.procs, self.output)
        except NonFiniteLogits as exc:
            return self.fail(exc)
        except GrammarDeadEnd as exc:          # stop_reason says why (llguidance's error, or no token left)
            self.finish(DEAD_END, str(exc), self.detok.text[:self.streamed])
            return True
        if self.t_first is None:
            self.t_first = time.perf_counter()
        self.output.append(token)
        if self.procs is not None:
            self.procs.accept(token)
        try:
            if lp is not None:
                lp = lp if self.detok.texts is None else self.detok.texts.fill(lp)
                self.logprobs.append(lp)
                self.cum_lp += lp.logprob
            delta = self.detok.add(token)
            reason, stop_reason, cut = self._check_stop(token, delta, model)
            self._emit(token, lp, reason, stop_reason, cut, on_token)
        except DecodeFailed as exc:           # the tokenizer failed on this request's tokens (safe_text.py)
            return self.fail(exc)
        return reason is not None

    def _collect_prompt(self, start, n, logits):
        """Logprobs of the prompt tokens this chunk predicts; True when the row is not finite (failed)."""
        for j in range(min(n, logits.shape[0])):
            pos = start + j
            if pos + 1 >= len(self.prompt):
                break
            lse = logsumexp(logits[j])
            if not math.isfinite(lse):
                return self.fail(NonFiniteLogits(f"the model's logits at position {pos} are not finite"))
            lp = token_logprobs(logits[j], self.prompt[pos + 1], self.prompt_k, lse)
            try:
                self.prompt_lps.append(lp if self.detok.texts is None else self.detok.texts.fill(lp))
            except DecodeFailed as exc:
                return self.fail(exc)
        return False

    def _check_stop(self, token, delta, model):
        """(finish_reason, stop_reason, text cut index) after a new token; reason None = go on.
        vLLM's values: eos, a stop token or a stop string -> "stop" (stop_reason None for eos)."""
        p = self.params
        if not p.ignore_eos and token in model.eos_token_ids:
            return "stop", None, None
        if token in p.stop_token_ids:
            return "stop", token, None
        grammar = self.procs.grammar if self.procs is not None else None
        if grammar is not None and grammar.stopped():
            return "stop", None, None          # the structured output is complete: nothing more is allowed
        if delta and p.stop and len(self.output) > p.min_tokens:
            text = self.detok.text
            lo = len(text) - len(delta)
            best = None
            for s in p.stop:
                i = text.find(s, max(0, lo - len(s) + 1))
                if i >= 0 and (best is None or i < best[0]):
                    best = (i, s)
            if best is not None:
                cut = best[0] + len(best[1]) if p.include_stop_str_in_output else best[0]
                return "stop", best[1], cut
        if (p.max_tokens is not None and len(self.output) >= p.max_tokens) or self.num_tokens() >= model.max_seq_len:
            return "length", None, None
        return None, None, None

    def _emit(self, token, lp, reason, stop_reason, cut, on_token):
        if reason is None:
            text = self.detok.text
            safe = len(text) - self.holdback
            delta = text[self.streamed:safe] if safe > self.streamed else ""
        else:
            if cut is None:
                self.detok.finish()
                text = self.detok.text
            else:
                text = self.detok.text[:cut]
            delta = text[self.streamed:]
        self.streamed += len(delta)
        if reason is not None:
            self.finish(reason, stop_reason, text)
        if on_token is not None:
            on_token(StreamEvent(self.index, token, delta, reason, self.request_id, self.sample_index, lp))
