"""The two generating routes, /v1/completions and /v1/chat/completions: submit, then stream or collect.

Role in the data flow: parse (params.py) -> tokenize and check against the model (state.py) -> one
engine request per prompt through the backend, all feeding one asyncio queue -> either SSE chunks as
outputs come (sse.py) or one response at the end (responses.py). Whatever ends the HTTP exchange early
(the client disconnects, the stream is cancelled, an error) aborts every engine request of it that is
still running, which frees its KV blocks at once.
"""
import asyncio
import time
import uuid

from fastapi.responses import JSONResponse, Response, StreamingResponse

from . import chat_output
from . import responses as rsp
from . import sse
from ..errors import InvalidArgument
from .errors import APIError, bad_param
from .params import parse_chat, parse_completion
from .response_format import check_compiles



class Call:
    """One HTTP generation call: its engine requests, trackers and shared output queue."""

    def __init__(self, state, kind, req, model):
        self.state, self.kind, self.req, self.model = state, kind, req, model
        self.id = f"{'cmpl' if kind == 'completion' else 'chatcmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.queue = asyncio.Queue()
        self.trackers, self.rids, self.open = {}, [], set()
        self.tok = state.tok_text
        self.shapers = {}                 # chat choice index -> its ChoiceShaper (None: text is the content)

    def shaper(self, index):
        if index not in self.shapers:
            self.shapers[index] = chat_output.shaper_for(self.state, self.req)
        return self.shapers[index]

    def submit(self, prompts):
        """prompts: [(token ids, prompt text, max_tokens)]; validated before anything is submitted."""
        params = [self.state.params(self.req.sampling, mt) for _, _, mt in prompts]
        try:
            for i, ((ids, text, _), p) in enumerate(zip(prompts, params)):
                rid = f"{self.id}-{i}"
                self.trackers[rid] = rsp.Tracker(i, self.req.n, ids, text)
                self.state.backend.submit(rid, ids, p, len(ids), queue=self.queue)
                self.rids.append(rid)
                self.open.add(rid)
        except BaseException:             # e.g. the queue bound refused prompt 3 of 4: drop 1 and 2 too
            self.abort_open()
            raise

    def abort_open(self):
        for rid in list(self.open):
            self.state.backend.abort(rid)
        self.open.clear()

    async def next(self):
        """(tracker, deltas) of the next engine output; raises the engine's error for a request."""
        return self.take(await self.queue.get())

    def ready(self):
        """The outputs already queued (one engine step may have delivered several): taken without waiting."""
        items = []
        while not self.queue.empty():
            items.append(self.queue.get_nowait())
        return items

    def take(self, item):
        public = self.state.info.public
        if isinstance(item, InvalidArgument):           # the engine refused the request when it was added
            raise APIError(400, public(item), param=item.parameter, code="invalid_value")
        if isinstance(item, BaseException):
            raise item
        err = getattr(item, "error", None)
        if err is not None:
            self.open.discard(item.request_id)
            raise APIError(400, public(err), code="invalid_request")
        tr = self.trackers[item.request_id]
        deltas = tr.deltas(item)
        if item.finished or tr.done:
            self.open.discard(item.request_id)
        return tr, deltas

    def usage(self):
        return rsp.usage(list(self.trackers.values()), drop_generated=getattr(self.req, "max_tokens", 1) == 0)


async def completions(state, request, body):
    req = parse_completion(body, state.cfg.max_n, state.cfg.disable_any_whitespace, state.max_logprobs)
    if len(req.prompts) > state.cfg.max_prompts:
        raise bad_param("prompt", f"{len(req.prompts)} prompts in one request; the server takes at most "
                                  f"{state.cfg.max_prompts} (--max-prompts)")
    call = Call(state, "completion", req, state.check_model(req.model))
    call.submit(await asyncio.to_thread(_completion_prompts, state, req))   # tokenizing: off the event loop
    return await _respond(call, request)


def _completion_prompts(state, req):
    check_compiles(state.info, req.sampling.get("structured_outputs"))
    prompts = []
    for p in req.prompts:
        ids = state.info.encode(p, add_special_tokens=True)
        text = p if isinstance(p, str) else state.info.decode(ids)
        asked = None if req.max_tokens is None else max(req.max_tokens, 1)
        prompts.append((ids, text, state.max_tokens_for(asked, len(ids))))
    return prompts


async def chat(state, request, body):
    req = parse_chat(body, state.cfg.max_n, state.cfg.disable_any_whitespace, state.max_logprobs)
    chat_output.check(state, req)
    call = Call(state, "chat", req, state.check_model(req.model))
    call.submit([await asyncio.to_thread(_chat_prompt, state, req)])        # the template and tokenizer: off it
    return await _respond(call, request)


def _chat_prompt(state, req):
    chat_output.check_compiles(state, req)
    text = state.info.render_chat(req.messages, add_generation_prompt=req.add_generation_prompt,
                                  tools=req.tools.tools if req.tools is not None else None)
    ids = state.info.encode(text, add_special_tokens=False, param="messages")
    return ids, text, state.max_tokens_for(req.max_tokens, len(ids))


async def _respond(call, request):
    if call.req.stream:
        return StreamingResponse(_stream(call), media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)
    try:
        per_choice = await _collect(call, request)
    finally:
        call.abort_open()
    if per_choice is None:                   # the client is gone: its requests were aborted
        return Response(status_code=499)
    return JSONResponse(_final(call, per_choice))


async def _collect(call, request):
    """Wait for every sample; {choice index: (tracker, [deltas])}, or None as soon as the client is gone
    (watched the whole time, as streams are: its requests are then aborted and their KV blocks freed)."""
    got = {}
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        while call.open:
            nxt = asyncio.ensure_future(call.next())
            await asyncio.wait({nxt, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not nxt.done():
                nxt.cancel()
                return None
            for tr, deltas in [nxt.result()] + [call.take(item) for item in call.ready()]:   # one wait a step
                for d in deltas:
                    got.setdefault(d.index, (tr, []))[1].append(d)
        return got
    finally:
        gone.cancel()


async def _disconnected(request):
    """Returns when the client disconnects (its body was read already: the next ASGI message is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _final(call, per_choice):
    choices = []
    for index in sorted(per_choice):
        tr, ds = per_choice[index]
        d = rsp.merge_deltas(ds)
        if call.kind == "completion":
            choices.append(rsp.completion_choice(d, call.req, tr, call.tok))
        else:
            sh = call.shaper(index)
            shaped = sh.message(d.text, d.finish_reason) if sh is not None else None
            choices.append(rsp.chat_choice(d, call.req, call.tok, shaped=shaped))
    kind = "text_completion" if call.kind == "completion" else "chat.completion"
    return rsp.envelope(kind, call.id, call.created, call.model, choices, call.usage())


async def _stream(call):
    kind = "text_completion" if call.kind == "completion" else "chat.completion.chunk"
    chunks = sse.Chunks(kind, call.id, call.created, call.model)
    started = set()
    try:
        if call.kind == "chat":
            yield b"".join(chunks.event([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                          "finish_reason": None}]) for i in range(len(call.rids) * call.req.n))
        failed = False
        while call.open and not failed:
            out = []                          # what is queued now goes out as one write
            for item in [await call.queue.get()] + call.ready():
                try:
                    tr, deltas = call.take(item)
                except APIError as exc:
                    out.append(sse.event(exc.body()))
                    failed = True
                    break
                choices = [c for c in (_chunk_choice(call, tr, d, started) for d in deltas
                                       if d.text or d.finish_reason or d.token_ids or d.index not in started)
                           if c is not None]
                if choices:
                    out.append(chunks.event(choices))
            if out:
                yield b"".join(out)
        if call.req.include_usage:
            yield chunks.event([], call.usage())
        yield sse.DONE
    finally:                                  # the client went away (cancelled) or we are done
        call.abort_open()


def _chunk_choice(call, tr, d, started):
    first = d.index not in started
    started.add(d.index)
    if call.kind == "completion":
        return rsp.completion_choice(d, call.req, tr, call.tok, first=first)
    sh = call.shaper(d.index)
    if sh is None:
        return rsp.chat_choice(d, call.req, call.tok, message=False)
    fields, reason = sh.feed(d.text), d.finish_reason
    if reason is not None:
        rest, reason = sh.finish(reason)
        fields = chat_output.join(fields, rest)
    if not fields and reason is None and not (call.req.logprobs and d.token_ids):
        return None                           # everything held back (a marker may be starting)
    return rsp.chat_choice(d, call.req, call.tok, message=False, shaped=(fields, reason))
