"""Result records of generation and scoring (vLLM's RequestOutput / CompletionOutput), the streaming
event and the per-step statistics.

Role in the data flow: the engine (engine.py) builds one RequestOutput per request that progressed in
a step, from its Request(s) (request.py): cumulative text, token ids and logprobs so far, `finished`
once done. A request that failed validation or while running carries `error` (an InvalidArgument
naming the request and the problem) and empty outputs; the other requests are unaffected. `Score` is
what llm.score returns (log-likelihood of a text), built from a score request's prompt logprobs.
StreamEvent is what a per-token callback receives; StepStats what a per-step callback receives.
"""
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Logprob:
    """vLLM's Logprob: one token's log-probability, its rank (1 = most likely) and its text."""
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass(frozen=True)
class TokenLogprobs(Mapping):
    """One position's log-probabilities (log_softmax of the raw model logits, as vLLM's default
    raw_logprobs). As vLLM's per-position `dict[token_id, Logprob]` it maps the chosen token and the
    `top` most likely ones to Logprob(logprob, rank, decoded_token); the flat fields stay too."""
    token_id: int
    logprob: float
    rank: int                  # 1 + number of tokens with a strictly higher logprob
    top: tuple                 # ((token_id, logprob), ...) the n most likely, ties by token id
    decoded: tuple | None = None   # {token_id: text} items of the entries above, when a tokenizer was there

    def _entries(self):
        out = {int(t): Logprob(float(lp), i + 1) for i, (t, lp) in enumerate(self.top)}
        out[int(self.token_id)] = Logprob(float(self.logprob), int(self.rank))
        if self.decoded:
            text = dict(self.decoded)
            out = {t: Logprob(lp.logprob, lp.rank, text.get(t)) for t, lp in out.items()}
        return out

    def __getitem__(self, token_id):
        return self._entries()[token_id]

    def __iter__(self):
        return iter(self._entries())

    def __len__(self):
        return len(self._entries())

    def to_dict(self):
        return {"token_id": self.token_id, "logprob": self.logprob, "rank": self.rank,
                "top": [[t, lp] for t, lp in self.top]}


@dataclass(frozen=True)
class RequestMetrics:
    """time.perf_counter() stamps of one request (vLLM's RequestOutput.metrics) and its preemptions."""
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None        # None for scores
    finished_time: float | None           # None while running
    preemptions: int

    @property
    def time_to_first_token(self):
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def latency(self):
        return None if self.finished_time is None else self.finished_time - self.arrival_time


@dataclass
class CompletionOutput:
    """One sample of a request (vLLM's CompletionOutput). While the request runs, `text` holds what is
    safe to show (a possible stop string held back); once finished it is the final text."""
    index: int
    text: str
    token_ids: list
    cumulative_logprob: float | None       # sum of the sampled tokens' logprobs (when logprobs asked)
    logprobs: list | None                  # list[TokenLogprobs] when SamplingParams.logprobs is set
    finish_reason: str | None = None       # "stop" (eos, stop string or stop token) | "length" | "abort"
    stop_reason: object = None             # the stop string or stop token id that ended it; None for eos

    def finished(self):
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """vLLM's RequestOutput, plus `error`. The flat fields of the old Completion (token_ids, text,
    finish_reason, stop_reason, logprobs, cumulative_logprob) are properties of outputs[0]."""
    request_id: object
    prompt: str | None
    prompt_token_ids: list
    prompt_logprobs: list | None           # [None, TokenLogprobs, ...] when SamplingParams.prompt_logprobs set
    outputs: list = field(default_factory=list)
    finished: bool = False
    metrics: RequestMetrics | None = None
    error: Exception | None = None         # colibri: this request failed (the others went on)

    def _first(self, name, default):
        return getattr(self.outputs[0], name) if self.outputs else default

    token_ids = property(lambda self: self._first("token_ids", []), doc="outputs[0].token_ids")
    text = property(lambda self: self._first("text", ""), doc="outputs[0].text")
    finish_reason = property(lambda self: self._first("finish_reason", None), doc="outputs[0].finish_reason")
    stop_reason = property(lambda self: self._first("stop_reason", None), doc="outputs[0].stop_reason")
    logprobs = property(lambda self: self._first("logprobs", None), doc="outputs[0].logprobs")
    cumulative_logprob = property(lambda self: self._first("cumulative_logprob", None),
                                  doc="outputs[0].cumulative_logprob")


def Completion(prompt_token_ids, token_ids=(), text="", finish_reason=None, logprobs=None, stop_reason=None,
               error=None, request_id=None, metrics=None, prompt=None):
    """The old flat record as a one-sample RequestOutput (kept for callers that build results)."""
    outputs = [] if error is not None and not token_ids else [
        CompletionOutput(0, text, list(token_ids), cumulative_logprob(logprobs), logprobs, finish_reason,
                         stop_reason)]
    return RequestOutput(request_id, prompt, list(prompt_token_ids), None, outputs, True, metrics, error)


def cumulative_logprob(logprobs):
    """Sum of the sampled tokens' logprobs, left to right (as the request accumulates it)."""
    return None if logprobs is None else float(sum(lp.logprob for lp in logprobs))


@dataclass
class Score:
    """llm.score: the log-likelihood of each prompt token after the first (a language-model score,
    not vLLM's cross-encoder score)."""
    prompt_token_ids: list
    token_logprobs: list = field(default_factory=list)   # logprob of prompt token i given tokens < i, i >= 1
    total_logprob: float = 0.0
    num_tokens: int = 0                                    # tokens in the prompt (len(token_logprobs) + 1)
    error: Exception | None = None
    request_id: object = None
    metrics: RequestMetrics | None = None

    @classmethod
    def from_output(cls, out):
        """The Score of a finished score request's RequestOutput (its prompt_logprobs)."""
        if out.error is not None:
            return cls(list(out.prompt_token_ids), error=out.error, request_id=out.request_id, metrics=out.metrics)
        lps = [p.logprob for p in out.prompt_logprobs[1:]]
        return cls(list(out.prompt_token_ids), lps, float(np.sum(lps, dtype=np.float64)), len(out.prompt_token_ids),
                   request_id=out.request_id, metrics=out.metrics)


def failed_output(request_id, prompt_token_ids, error, kind="generate", prompt=None):
    """The result of a request that failed before running (a bad prompt, bad params)."""
    if kind == "score":
        return Score(list(prompt_token_ids or []), error=error, request_id=request_id)
    return RequestOutput(request_id, prompt, list(prompt_token_ids or []), None, [], True, None, error)


@dataclass(frozen=True)
class StreamEvent:
    """One generated token as it comes: `text` is the newly completed text (may be ""), and the
    concatenation of a sample's event texts equals its final text. The last event of a sample has
    finish_reason set. `index` is the request's position in the call (api.py) or in the order of
    add_request (the engine)."""
    index: int
    token_id: int
    text: str
    finish_reason: str | None = None
    request_id: object = None
    sample_index: int = 0                   # which of the request's n samples
    logprobs: TokenLogprobs | None = None   # of this token, when asked


@dataclass(frozen=True)
class StepStats:
    """One scheduler step (one batched model call), for reports: what ran and what was left."""
    t_start: float                 # time.perf_counter() around the model call and the sampling after it
    t_end: float
    prefill_tokens: int            # prompt (or recomputed) tokens fed in this step
    decode_tokens: int             # one per sequence that was generating
    running: int                   # sequences holding a KV cache after the step
    waiting: int                   # requests queued (new or preempted) after the step
    free_blocks: int               # KV blocks free after the step
    finished: int                  # requests that finished in this step
    preemptions: int               # preemptions while scheduling this step
