"""generate / chat / score: the entry points behind LLM.generate/chat/score (vLLM's shapes).

Role in the data flow: normalize prompts (str | token ids | {"prompt"} | {"prompt_token_ids"} or a
list of them) and sampling params (one for all, or one per prompt, SamplingParams or dict), add every
request to an LLMEngine (engine.py: the LLM's persistent one, or a fresh one over a bare step model)
through the engine client (client.py InProcessClient: submit FINAL_ONLY, poll = one step) and poll
until they are all finished; results in prompt order. errors="raise"
(vLLM's LLM.generate, what cd.LLM asks): a bad prompt or bad per-request params raise InvalidArgument
(a ValueError) naming the request, and so does a request that fails while it runs (its tokenizer,
non-finite logits: that error's class). errors="return" (the default here; the batch jobs'): that
request gets an `error` and the others go on. A wrong call shape (a params list of the wrong length,
repeated request ids) always raises InvalidArgument. If anything raises mid-way (a request's error,
the model, a callback, Ctrl-C), this call's unfinished requests are aborted (their KV blocks freed)
before it propagates. Default request ids are vLLM's: str(n) from the engine's counter, so no two
calls on one persistent engine share one; unseeded samples still derive their seeds from the prompt's
position in the call (as before the ids were fresh), so repeating a call repeats its results.
"""
from dataclasses import replace

from ..errors import InvalidArgument
from .chat import renderer
from .client import InProcessClient
from .outputs import Score, failed_output
from .params import RequestOutputKind, SamplingParams
from .prompts import as_prompt_list

FINAL_ONLY = RequestOutputKind.FINAL_ONLY       # what vLLM's LLM.generate asks of its engine
ERRORS = ("raise", "return")                    # what a failed request does to the call


def _engine(model, tokenizer, scheduler_config, engine):
    if engine is not None:
        return engine
    from .engine import LLMEngine
    return LLMEngine(model, tokenizer, scheduler_config)


def generate(model, tokenizer, prompts, sampling_params=None, scheduler_config=None, on_token=None,
             request_ids=None, on_step=None, engine=None, use_tqdm=False, errors="return"):
    """-> list[RequestOutput]; on_token(StreamEvent) is called for every generated token (its index
    is the prompt's position), on_step(StepStats) after every batched model call."""
    items = as_prompt_list(prompts)
    params = _params_list(sampling_params, len(items))
    eng = _engine(model, tokenizer, scheduler_config, engine)
    rids, keys = _rids(request_ids, len(items), eng), _seed_keys(request_ids, len(items))
    client = InProcessClient(eng)
    adds = [(lambda it=it, sp=sp, rid=rid, k=k: client.submit(rid, it, sp, output_kind=FINAL_ONLY, seed_key=k))
            for it, sp, rid, k in zip(items, params, rids, keys)]
    return _drive(client, adds, rids, on_token, on_step, use_tqdm, errors=errors)


def chat(model, tokenizer, template, conversations, sampling_params=None, scheduler_config=None,
         on_token=None, request_ids=None, on_step=None, engine=None, use_tqdm=False, errors="return",
         add_generation_prompt=True, continue_final_message=False, tools=None, chat_template_kwargs=None):
    """Each conversation (a list of {"role", "content"}) rendered with `template` (a ChatTemplate),
    encoded without added special tokens, then generated. add_generation_prompt, continue_final_message
    (leave the last message open for the model to go on; excludes add_generation_prompt), tools and
    chat_template_kwargs (more template variables): vLLM's LLM.chat."""
    convs = as_conversation_list(conversations)
    params = _params_list(sampling_params, len(convs))
    render = renderer(template, add_generation_prompt, continue_final_message, tools, chat_template_kwargs)
    eng = _engine(model, tokenizer, scheduler_config, engine)
    rids, keys = _rids(request_ids, len(convs), eng), _seed_keys(request_ids, len(convs))
    client = InProcessClient(eng)

    def add(conv, sp, rid, key):
        try:
            text = render(conv)
        except InvalidArgument as exc:
            raise InvalidArgument(f"request {rid!r}: {exc}", parameter=exc.parameter, value=exc.value) from None
        client.submit(rid, text, sp, add_special_tokens=False, output_kind=FINAL_ONLY, seed_key=key)
    adds = [(lambda c=c, sp=sp, rid=rid, k=k: add(c, sp, rid, k)) for c, sp, rid, k in zip(convs, params, rids, keys)]
    return _drive(client, adds, rids, on_token, on_step, use_tqdm, errors=errors)


def score(model, tokenizer, prompts, scheduler_config=None, request_ids=None, on_step=None, engine=None,
          use_tqdm=False, errors="return"):
    """-> list[Score]: log-probability of every prompt token after the first (a score request is a
    prompt_logprobs=0 request that generates nothing)."""
    items = as_prompt_list(prompts)
    eng = _engine(model, tokenizer, scheduler_config, engine)
    rids = _rids(request_ids, len(items), eng)
    client = InProcessClient(eng)
    adds = [(lambda it=it, rid=rid: client.submit(rid, it, output_kind=FINAL_ONLY, kind="score"))
            for it, rid in zip(items, rids)]
    outs = _drive(client, adds, rids, None, on_step, use_tqdm, kind="score", errors=errors)
    return [o if isinstance(o, Score) or o is None else Score.from_output(o) for o in outs]


def _drive(client, adds, rids, on_token, on_step, use_tqdm, kind="generate", errors="return"):
    """Add the requests (each add submits one to the client), poll until all are finished. A failed add or
    a request failing while it runs: raised (errors="raise") or that request's error (errors="return")."""
    if errors not in ERRORS:
        raise InvalidArgument(f"errors must be one of {ERRORS}, got {errors!r}", parameter="errors", value=errors)
    if len(set(map(_hashable, rids))) != len(rids):
        raise InvalidArgument("request ids must be unique within a call")
    results, pos = [None] * len(rids), {}
    bar = _progress_bar(use_tqdm, len(rids))
    try:
        for i, (add, rid) in enumerate(zip(adds, rids)):
            try:
                add()
                pos[rid] = i
            except InvalidArgument as exc:
                if errors == "raise":
                    raise
                results[i] = failed_output(rid, None, exc, kind)
        client.on_token = None if on_token is None else (lambda ev: on_token(replace(ev, index=pos[ev.request_id]))
                                                         if ev.request_id in pos else None)
        client.on_step = on_step
        todo = set(pos)
        while todo:
            for out in client.poll():
                if out.finished and out.request_id in todo:
                    if out.error is not None and errors == "raise":
                        raise out.error
                    results[pos[out.request_id]] = out
                    todo.discard(out.request_id)
                    if bar is not None:
                        bar.update(1)
    except BaseException:
        for rid in pos:
            client.abort(rid)
        raise
    finally:
        if bar is not None:
            bar.close()
    return results


def _progress_bar(use_tqdm, total):
    """vLLM's "Processed prompts" bar (on stderr); use_tqdm may be a tqdm-like class, as vLLM allows."""
    if not use_tqdm:
        return None
    if callable(use_tqdm):
        make = use_tqdm
    else:
        from tqdm import tqdm as make
    return make(total=total, desc="Processed prompts", dynamic_ncols=True)


def _seed_keys(request_ids, n):
    """What unseeded samples derive their seeds from: the caller's ids, else the prompt's position in the call
    (so a call's results never depend on the calls before it, whatever fresh ids it got)."""
    return [None] * n if request_ids is not None else list(range(n))


def _hashable(x):
    return x if isinstance(x, (str, int, tuple)) else repr(x)


def _rids(request_ids, n, eng):
    if request_ids is None:
        return eng.new_request_ids(n)
    if len(request_ids) != n:
        raise InvalidArgument(f"got {len(request_ids)} request_ids for {n} prompts")
    return list(request_ids)


# ---------------------------------------------------------------- normalization


def as_conversation_list(conversations):
    if not isinstance(conversations, (list, tuple)):
        raise InvalidArgument("conversations must be a list of messages or a list of conversations")
    if conversations and all(isinstance(m, dict) for m in conversations):
        return [list(conversations)]
    return list(conversations)


def _params_list(sampling_params, n):
    if sampling_params is None or isinstance(sampling_params, (SamplingParams, dict)):
        return [sampling_params] * n
    if isinstance(sampling_params, (list, tuple)):
        if len(sampling_params) != n:
            raise InvalidArgument(f"got {len(sampling_params)} sampling_params for {n} prompts")
        return list(sampling_params)
    raise InvalidArgument(f"sampling_params must be SamplingParams, a dict or a list of them, "
                          f"got {type(sampling_params).__name__}")
