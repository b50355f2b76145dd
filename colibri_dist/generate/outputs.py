"""Result records of generation and scoring, and the streaming event.

Role in the data flow: the scheduler fills one Completion (generate/chat) or Score (score) per
request, in request order; StreamEvent is what the per-token callback receives while it runs.
A request that failed validation carries `error` (an InvalidArgument naming the problem) and empty
results; the other requests are unaffected.
"""
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TokenLogprobs:
    """One generated token's log-probabilities (log_softmax of the raw model logits, as vLLM)."""
    token_id: int
    logprob: float
    rank: int                  # 1 + number of tokens with a strictly higher logprob
    top: tuple                 # ((token_id, logprob), ...) the n most likely, ties by token id

    def to_dict(self):
        return {"token_id": self.token_id, "logprob": self.logprob, "rank": self.rank,
                "top": [[t, lp] for t, lp in self.top]}


@dataclass(frozen=True)
class RequestMetrics:
    """time.perf_counter() stamps of one request (vLLM's RequestOutput.metrics) and its preemptions."""
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None        # None for scores
    finished_time: float
    preemptions: int

    @property
    def time_to_first_token(self):
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def latency(self):
        return self.finished_time - self.arrival_time


@dataclass
class Completion:
    prompt_token_ids: list
    token_ids: list = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None   # "length" | "stop" | "eos"; None when error is set
    logprobs: list | None = None       # list[TokenLogprobs] when SamplingParams.logprobs > 0
    stop_reason: object = None         # the stop string or stop token id that ended it (vLLM's stop_reason)
    error: Exception | None = None
    request_id: object = None
    metrics: RequestMetrics | None = None


@dataclass
class Score:
    prompt_token_ids: list
    token_logprobs: list = field(default_factory=list)   # logprob of prompt token i given tokens < i, i >= 1
    total_logprob: float = 0.0
    num_tokens: int = 0                                    # tokens in the prompt (len(token_logprobs) + 1)
    error: Exception | None = None
    request_id: object = None
    metrics: RequestMetrics | None = None


@dataclass(frozen=True)
class StreamEvent:
    """One generated token as it comes: `text` is the newly completed text (may be ""), and the
    concatenation of a request's event texts equals its Completion.text. The last event of a request
    has finish_reason set."""
    index: int                 # position of the request in the call
    token_id: int
    text: str
    finish_reason: str | None = None


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
