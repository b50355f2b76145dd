"""LLMEngine: the one generation loop (vLLM's LLMEngine / nano-vllm's shape) over a step model.

Role in the data flow: LLM.generate/chat/score (api.py), the pool's SequenceRunner lanes,
`colibri generate` and the HTTP server all drive an LLMEngine:
    add_request(request_id, prompt, params)  prompt: str | token ids | {"prompt"} | {"prompt_token_ids"};
                                             params: SamplingParams | dict | None (the model's
                                             generation_config defaults apply to dict/None);
                                             kind="score" (or params.prompt_logprobs) for logprobs;
                                             (prompt_)logprobs above max_logprobs are refused
    abort(request_id)                        frees its KV blocks at once (after the in-flight model
                                             call when another thread is stepping)
    step() -> list[RequestOutput]            one batched model call (scheduler.py's schedule(), the
                                             model, its update()); an output for
                                             every request that got a token or finished (cumulative
                                             text / token_ids / logprobs, or only the new ones, or
                                             only the final one: SamplingParams.output_kind), and
                                             the final "abort" output of requests aborted since the
                                             last step
    has_unfinished(), stream()               stream() yields step() outputs until nothing is left
    new_request_ids(n)                       ids "0", "1", ... never handed out twice (LLM.generate's)
Requests join and leave the running batch at step boundaries; a request's tokens and logprobs are
the same bits whatever else runs (see scheduler.py) or gets aborted beside it.

Threads: ONE thread drives step()/stream(); add_request, abort, has_unfinished and
get_num_unfinished_requests may be called from any thread at any time. They take the engine's lock
only for a few dict/deque operations: new requests wait in a queue that step() drains at its
start; an abort while a step is in flight is applied when that step's model call returns.
"""
import itertools
import threading
from collections import deque

from ..errors import InvalidArgument
from .detok import Detokenizer, TokenTexts
from .grammar import Grammars
from .logits import Processors, bad_words_token_ids
from .outputs import RequestOutput
from .prompts import encode_prompt
from .params import RequestOutputKind, SamplingParams, check_logprobs, check_token_ids_in_vocab
from .request import Request
from .sampler import Sampler
from .scheduler import Scheduler, SchedulerConfig

KINDS = ("generate", "score")


class _Group:
    """One added request: its n samples (Requests) and what its RequestOutput reports."""

    def __init__(self, request_id, kind, prompt_text, prompt_ids, params, children, output_kind):
        self.request_id, self.kind, self.prompt_text, self.prompt_ids = request_id, kind, prompt_text, prompt_ids
        self.params, self.children, self.output_kind = params, children, output_kind
        self.sent_prompt = False
        self.seed_key = request_id               # what unseeded samples derive their seed from

    def finished(self):
        for c in self.children:
            if not c.finished:
                return False
        return True

    def output(self, finished=None):
        """The RequestOutput now (finished: self.finished() when the caller has it)."""
        first, delta = self.children[0], self.output_kind == RequestOutputKind.DELTA
        error = first.error if len(self.children) == 1 else \
            next((c.error for c in self.children if c.error is not None), None)
        prompt_lps = None if first.prompt_k is None else [None] + list(first.prompt_lps)
        if delta and self.sent_prompt:
            prompt_lps = None if prompt_lps is None else []
        self.sent_prompt = True
        outs = [] if self.kind == "score" else [c.completion_output(delta) for c in self.children]
        return RequestOutput(self.request_id, self.prompt_text, list(self.prompt_ids), prompt_lps, outs,
                             self.finished() if finished is None else finished, first.metrics(), error)


class LLMEngine:
    def __init__(self, model, tokenizer=None, scheduler_config=None, default_params=None):
        """model: a step model (scheduler.py's StepModel protocol, e.g. cd.LLM); tokenizer: for text
        prompts, streaming text and bad_words (None = token ids only); default_params: the
        SamplingParams fields that dict / None params start from (the model's generation_config)."""
        self.model, self.tokenizer = model, tokenizer
        self.scheduler_config = scheduler_config or SchedulerConfig()
        self.default_params = dict(default_params or {})
        self.scheduler = Scheduler(model, self.scheduler_config)
        # the model call of a step: its inputs come from requests add_request checked (see LLM.forward_trusted)
        self._forward = getattr(model, "forward_trusted", None) or model.forward
        self._texts = TokenTexts(tokenizer) if tokenizer is not None else None   # decoded_token cache
        self._lock = threading.Lock()
        self._groups = {}            # request_id -> _Group: every unfinished request
        self._incoming = deque()     # groups added since the last step
        self._deferred = []          # aborts that arrived while a step was in flight
        self._aborted = []           # final outputs of aborted requests, for the next step()
        self._stepping = False
        self._counter = 0
        self._grammars = None        # grammar.Grammars, made at the first structured-output request
        self._ids = itertools.count()  # default request ids of generate/chat/score (vLLM's request_counter)

    # ------------------------------------------------------------ requests (any thread)
    def add_request(self, request_id, prompt, params=None, arrival_time=None, *, kind="generate",
                    add_special_tokens=True, resume=None, output_kind=None, seed_key=None):
        """Queue a request; it joins the batch at the next step. Raises InvalidArgument naming the
        request for a bad prompt, bad params, a prompt the model cannot take, or an id in use.
        resume=(token ids, logprobs or None): continue from tokens generated elsewhere (n=1).
        output_kind: overrides params.output_kind (LLM.generate asks FINAL_ONLY, as vLLM's LLM does).
        seed_key: what a sample without its own seed derives one from (default: request_id); LLM.generate
        gives the prompt's position in its call with default ids, so the fresh ids never change a result."""
        if kind not in KINDS:
            raise InvalidArgument(f"request {request_id!r}: kind must be one of {KINDS}, got {kind!r}")
        text, ids = self._encode(request_id, prompt, add_special_tokens)
        params = self._params(request_id, params) if kind == "generate" else None
        if output_kind is None:
            output_kind = params.output_kind if params is not None else RequestOutputKind.FINAL_ONLY
        group = _Group(request_id, kind, text, ids, params, [], RequestOutputKind(output_kind))
        if seed_key is not None:
            group.seed_key = seed_key
        bad = self._bad_words(request_id, params)
        compiled = self._compile(request_id, params)
        with self._lock:
            if request_id in self._groups:
                raise InvalidArgument(f"request {request_id!r}: a request with this id is already running")
            index, self._counter = self._counter, self._counter + 1
            group.children = self._children(group, index, bad, compiled)
            if resume:
                group.children[0].resume(*resume)
            if arrival_time is not None:
                for c in group.children:
                    c.t_added = arrival_time
            self._groups[request_id] = group
            self._incoming.append(group)
        return request_id

    def new_request_ids(self, n):
        """n request ids this engine never handed out before: str(k), vLLM's (LLM.generate's defaults)."""
        with self._lock:
            return [str(next(self._ids)) for _ in range(n)]

    def abort(self, request_id):
        """Stop a request: its KV blocks are freed now (or, when a step is running in another thread,
        as soon as that step's model call returns); the next step() reports its final output with
        finish_reason "abort". -> False when no such request is unfinished."""
        with self._lock:
            group = self._groups.pop(request_id, None)
            if group is None:
                return False
            if group in self._incoming:
                self._incoming.remove(group)
                self._abort_now(group)
            elif self._stepping:
                self._deferred.append(group)
            else:
                self._abort_now(group)
            return True

    def abort_request(self, request_ids):
        """vLLM's name: abort one id or an iterable of ids."""
        ids = [request_ids] if isinstance(request_ids, (str, int)) else list(request_ids)
        for rid in ids:
            self.abort(rid)

    def has_unfinished(self):
        with self._lock:
            return bool(self._groups or self._aborted)

    has_unfinished_requests = has_unfinished

    def get_num_unfinished_requests(self):
        with self._lock:
            return len(self._groups)

    # ------------------------------------------------------------ the loop (one thread)
    def step(self, on_token=None, on_step=None):
        """One batched model call -> [RequestOutput] of the requests that progressed (aborted ones
        first). on_token(StreamEvent) per generated token, on_step(StepStats) after the call."""
        with self._lock:
            while self._incoming:
                for c in self._incoming.popleft().children:
                    self.scheduler.add(c)
            self._stepping = True
        try:
            plan = self.scheduler.schedule()
            progressed = self.scheduler.update(plan, self._execute(plan), on_token, on_step)
        except BaseException:
            self._fail_all()
            raise
        with self._lock:
            self._stepping = False
            for group in self._deferred:
                self._abort_now(group)
            self._deferred = []
            outs, self._aborted = self._aborted, []
            for group in _groups_of(progressed):
                if self._groups.get(group.request_id) is not group:
                    continue                     # aborted during the step: its abort output is in outs
                finished = group.finished()
                if finished:
                    del self._groups[group.request_id]
                if finished or group.output_kind != RequestOutputKind.FINAL_ONLY:
                    outs.append(group.output(finished))
        return outs

    def stream(self, on_token=None, on_step=None):
        """Iterate step() outputs until no request is unfinished (the driving thread's loop)."""
        while self.has_unfinished():
            yield from self.step(on_token, on_step)

    # ------------------------------------------------------------ internals
    def _execute(self, plan):
        """The model call of a plan -> its logits ([] for an empty plan); structured outputs' masks are filled
        on the grammar thread meanwhile."""
        if not plan.batch:
            return []
        masks = plan.start_masks()
        outs = self._forward(plan.model_inputs())
        if masks is not None:
            masks.join()
        return outs

    def _abort_now(self, group):
        for c in group.children:
            self.scheduler.remove(c)
            if not c.finished:
                c.finish("abort")
        self._aborted.append(group.output())

    def _fail_all(self):
        """A step raised (the model, a callback, Ctrl-C): free every block, drop every request."""
        with self._lock:
            self._stepping = False
            self.scheduler.clear()
            self._groups.clear()
            self._incoming.clear()
            self._deferred, self._aborted = [], []

    def _encode(self, rid, prompt, add_special_tokens):
        ids, err = encode_prompt(self.tokenizer, prompt, rid, add_special_tokens)
        if err is not None:
            raise err
        m = self.model
        if not ids:
            raise InvalidArgument(f"request {rid!r}: empty prompt", parameter="prompt", value=prompt)
        if len(ids) > m.max_seq_len:
            raise InvalidArgument(f"request {rid!r}: prompt has {len(ids)} tokens, longer than "
                                  f"max_seq_len {m.max_seq_len}", parameter="prompt", value=len(ids))
        bad = next((t for t in ids if not 0 <= t < m.vocab_size), None)
        if bad is not None:
            raise InvalidArgument(f"request {rid!r}: token id {bad} outside the vocabulary [0, {m.vocab_size})",
                                  parameter="prompt", value=bad)
        text = prompt if isinstance(prompt, str) else prompt.get("prompt") if isinstance(prompt, dict) else None
        return text, ids

    def _params(self, rid, params):
        try:
            p = SamplingParams.from_dict(params, self.default_params)
        except InvalidArgument as exc:
            raise InvalidArgument(f"request {rid!r}: {exc}", parameter=exc.parameter, value=exc.value) from None
        except TypeError:
            raise InvalidArgument(f"request {rid!r}: sampling params must be SamplingParams or a dict, "
                                  f"got {params!r}") from None
        if not isinstance(p, SamplingParams):
            raise InvalidArgument(f"request {rid!r}: sampling params must be SamplingParams, got {params!r}")
        try:
            return check_logprobs(check_token_ids_in_vocab(p, self.model.vocab_size),
                                  self.scheduler_config.max_logprobs)
        except InvalidArgument as exc:
            raise InvalidArgument(f"request {rid!r}: {exc}", parameter=exc.parameter, value=exc.value) from None

    def _bad_words(self, rid, params):
        if params is None or not params.bad_words:
            return ()
        if self.tokenizer is None:
            raise InvalidArgument(f"request {rid!r}: SamplingParams.bad_words needs the model's tokenizer")
        return bad_words_token_ids(params.bad_words, self.tokenizer)

    def _compile(self, rid, params):
        """The Future of a structured-output request's compiled constraint (None without one): compiled on
        the grammar thread, so adding never waits for it (the scheduler admits the request when it is done)."""
        if params is None or params.structured_outputs is None:
            return None
        try:
            if self._grammars is None:
                self._grammars = Grammars.of_tokenizer(self.tokenizer, self.model.vocab_size,
                                                       getattr(self.model, "eos_token_ids", ()))
            return self._grammars.submit(params.structured_outputs)
        except InvalidArgument as exc:
            raise InvalidArgument(f"request {rid!r}: {exc}", parameter=exc.parameter, value=exc.value) from None

    def _start_after(self, params):
        """The token ids of params.structured_outputs.start_after (None without it)."""
        text = params.structured_outputs.start_after
        if text is None:
            return None
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        return list(getattr(enc, "ids", enc))

    def _children(self, group, index, bad, compiled=None):
        if group.kind == "score":
            req = Request(index, group.request_id, "score", list(group.prompt_ids))
            req.group = group
            return [req]
        p, base = group.params, self.scheduler_config.base_seed
        eos = tuple(getattr(self.model, "eos_token_ids", ()))
        out = []
        for i in range(p.n):
            slot = None if compiled is None else self._grammars.slot(compiled, self._start_after(p))
            procs = Processors(p, group.prompt_ids, eos, bad, slot)
            detok = Detokenizer(self.tokenizer, p.skip_special_tokens, self._texts) \
                if self.tokenizer is not None and p.detokenize else None
            req = Request(index, group.request_id, "generate", list(group.prompt_ids), p,
                          Sampler(p, base, group.seed_key, i), detok, procs if procs.active else None, i)
            req.group = group
            if i > 0:
                req.prompt_k = None              # prompt logprobs come from sample 0 only
            out.append(req)
        return out


def _groups_of(requests):
    """The distinct groups of these requests, in order of first appearance (a group hashes by identity)."""
    groups = {}
    for r in requests:
        groups[r.group] = None
    return list(groups)
