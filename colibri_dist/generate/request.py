"""One request's state inside the scheduler: tokens, cache position, sampler, detokenizer, result.

Role in the data flow: the scheduler creates a Request per prompt (after validation), moves it
between its waiting queue and running list, feeds it the model's logits (`advance`), and reads its
finished Completion or Score. Preemption (`reset_cache`) drops only the KV position; the sampled
tokens and the RNG state stay, so the recomputed sequence continues exactly where it was.
"""
import math
import time

import numpy as np

from ..errors import InvalidArgument
from .detok import NullDetokenizer
from .outputs import Completion, RequestMetrics, Score, StreamEvent
from .safe_text import DecodeFailed
from .sampler import NonFiniteLogits, logsumexp


class Request:
    def __init__(self, index, request_id, kind, prompt, params=None, sampler=None, detok=None):
        self.index, self.request_id, self.kind = index, request_id, kind
        self.prompt = prompt
        self.params, self.sampler = params, sampler
        self.detok = detok or NullDetokenizer()
        self.output, self.logprobs, self.score_lps = [], [], []
        self.seq, self.computed = None, 0
        self.streamed = 0                     # characters of text already streamed
        self.holdback = max((len(s) for s in params.stop), default=1) - 1 if params else 0
        self.result = None
        self.t_added, self.t_sched, self.t_first, self.t_done = time.perf_counter(), None, None, None
        self.preemptions = 0

    def num_tokens(self):
        return len(self.prompt) + len(self.output)

    def num_pending(self):
        return self.num_tokens() - self.computed

    def pending(self, n):
        """The next n tokens to feed: tokens[computed:computed + n] of prompt + output."""
        c, p = self.computed, len(self.prompt)
        if c >= p:
            return self.output[c - p:c - p + n]
        head = self.prompt[c:c + n]
        return head + self.output[:n - len(head)] if len(head) < n else head

    def reset_cache(self):
        self.seq, self.computed = None, 0
        self.score_lps = []
        self.preemptions += 1

    def metrics(self):
        return RequestMetrics(self.t_added, self.t_sched, self.t_first, self.t_done, self.preemptions)

    # ------------------------------------------------------------ after a forward
    def advance(self, n, logits, model, on_token):
        """Account n fed tokens with their logits; return True when the request is finished."""
        start = self.computed
        self.computed += n
        if self.kind == "score":
            return self._collect_score(start, n, logits)
        if self.computed < self.num_tokens():
            return False                      # mid-prompt chunk: its logits are not needed
        try:
            token, lp = self.sampler.sample(logits[-1])
        except NonFiniteLogits as exc:
            return self._fail(exc)
        if self.t_first is None:
            self.t_first = time.perf_counter()
        self.output.append(token)
        if lp is not None:
            self.logprobs.append(lp)
        try:
            delta = self.detok.add(token)
            reason, stop_reason, cut = self._check_stop(token, delta, model)
            self._emit(token, reason, stop_reason, cut, on_token)
        except DecodeFailed as exc:           # the tokenizer failed on this request's tokens (safe_text.py)
            return self._fail(exc)
        return reason is not None

    def _fail(self, exc):
        """Finish with an error naming this request (the scheduler releases its blocks)."""
        self.t_done = time.perf_counter()
        err = InvalidArgument(f"request {self.request_id!r}: {exc}")
        if self.kind == "score":
            self.result = Score(list(self.prompt), error=err, request_id=self.request_id, metrics=self.metrics())
        else:
            self.result = Completion(list(self.prompt), list(self.output), error=err, request_id=self.request_id,
                                     metrics=self.metrics())
        return True

    def _collect_score(self, start, n, logits):
        want = [(j, self.prompt[start + j + 1]) for j in range(n) if start + j + 1 < len(self.prompt)]
        for j, tok in want:
            lse = logsumexp(logits[j])
            if not math.isfinite(lse):
                return self._fail(NonFiniteLogits(f"the model's logits at position {start + j} are not finite"))
            self.score_lps.append(float(np.float64(np.float32(logits[j][tok])) - lse))
        if self.computed < len(self.prompt):
            return False
        self.t_done = time.perf_counter()
        self.result = Score(list(self.prompt), list(self.score_lps), float(np.sum(self.score_lps, dtype=np.float64)),
                            len(self.prompt), request_id=self.request_id, metrics=self.metrics())
        return True

    def _check_stop(self, token, delta, model):
        """(finish_reason, stop_reason, text cut index) after a new token; reason None = go on."""
        p = self.params
        if not p.ignore_eos and token in model.eos_token_ids:
            return "eos", None, None
        if token in p.stop_token_ids:
            return "stop", token, None
        if delta and p.stop:
            text = self.detok.text
            lo = len(text) - len(delta)
            best = None
            for s in p.stop:
                i = text.find(s, max(0, lo - len(s) + 1))
                if i >= 0 and (best is None or i < best[0]):
                    best = (i, s)
            if best is not None:
                return "stop", best[1], best[0]
        if len(self.output) >= p.max_tokens or self.num_tokens() >= model.max_seq_len:
            return "length", None, None
        return None, None, None

    def _emit(self, token, reason, stop_reason, cut, on_token):
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
            self.t_done = time.perf_counter()
            self.result = Completion(list(self.prompt), list(self.output), text, reason,
                                     list(self.logprobs) if self.params.logprobs > 0 else None,
                                     stop_reason, request_id=self.request_id, metrics=self.metrics())
        self.streamed += len(delta)
        if on_token is not None:
            on_token(StreamEvent(self.index, token, delta, reason))
