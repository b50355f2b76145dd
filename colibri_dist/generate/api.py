"""generate / chat / score: the entry points behind LLM.generate/chat/score (vLLM's shapes).

Role in the data flow: normalize prompts (str | token ids | {"prompt"} | {"prompt_token_ids"} or a
list of them) and sampling params (one for all, or one per prompt, SamplingParams or dict), add every
request to an LLMEngine (engine.py: the LLM's persistent one, or a fresh one over a bare step model)
and drive its step() loop until they are all finished; results in prompt order. A bad prompt or bad
per-request params give that request an `error` and the others go on; a wrong call shape (a params
list of the wrong length, repeated request ids) raises InvalidArgument. If anything raises
mid-way (the model, a callback, Ctrl-C), this call's unfinished requests are aborted (their KV
blocks freed) before it propagates.
"""
from dataclasses import replace

from ..errors import ColibriError, InvalidArgument
from .outputs import Score, failed_output
from .params import RequestOutputKind, SamplingParams

FINAL_ONLY = RequestOutputKind.FINAL_ONLY       # what vLLM's LLM.generate asks of its engine


def _engine(model, tokenizer, scheduler_config, engine):
    if engine is not None:
        return engine
    from .engine import LLMEngine
    return LLMEngine(model, tokenizer, scheduler_config)
from .prompts import as_prompt_list


def generate(model, tokenizer, prompts, sampling_params=None, scheduler_config=None, on_token=None,
             request_ids=None, on_step=None, engine=None, use_tqdm=False):
    """-> list[RequestOutput]; on_token(StreamEvent) is called for every generated token (its index
    is the prompt's position), on_step(StepStats) after every batched model call."""
    items = as_prompt_list(prompts)
    params = _params_list(sampling_params, len(items))
    eng = _engine(model, tokenizer, scheduler_config, engine)
    adds = [(lambda it=it, sp=sp, rid=rid: eng.add_request(rid, it, sp, output_kind=FINAL_ONLY))
            for it, sp, rid in zip(items, params, _rids(request_ids, len(items)))]
    return _drive(eng, adds, _rids(request_ids, len(items)), on_token, on_step, use_tqdm)


def chat(model, tokenizer, template, conversations, sampling_params=None, scheduler_config=None,
         on_token=None, request_ids=None, on_step=None, engine=None, use_tqdm=False):
    """Each conversation (a list of {"role", "content"}) rendered with `template` (a ChatTemplate) and
    add_generation_prompt=True, encoded without added special tokens, then generated."""
    convs = as_conversation_list(conversations)
    params = _params_list(sampling_params, len(convs))
    eng = _engine(model, tokenizer, scheduler_config, engine)
    rids = _rids(request_ids, len(convs))

    def add(conv, sp, rid):
        try:
            text = template.render(conv, add_generation_prompt=True)
        except InvalidArgument as exc:
            raise InvalidArgument(f"request {rid!r}: {exc}") from None
        eng.add_request(rid, text, sp, add_special_tokens=False, output_kind=FINAL_ONLY)
    adds = [(lambda c=c, sp=sp, rid=rid: add(c, sp, rid)) for c, sp, rid in zip(convs, params, rids)]
    return _drive(eng, adds, rids, on_token, on_step, use_tqdm)


def score(model, tokenizer, prompts, scheduler_config=None, request_ids=None, on_step=None, engine=None,
          use_tqdm=False):
    """-> list[Score]: log-probability of every prompt token after the first (a score request is a
    prompt_logprobs=0 request that generates nothing)."""
    items = as_prompt_list(prompts)
    eng = _engine(model, tokenizer, scheduler_config, engine)
    rids = _rids(request_ids, len(items))
    adds = [(lambda it=it, rid=rid: eng.add_request(rid, it, kind="score")) for it, rid in zip(items, rids)]
    outs = _drive(eng, adds, rids, None, on_step, use_tqdm, kind="score")
    return [o if isinstance(o, Score) or o is None else Score.from_output(o) for o in outs]


def _drive(eng, adds, rids, on_token, on_step, use_tqdm, kind="generate"):
    """Add the requests (a failed add becomes that request's error), step until all are finished."""
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
                results[i] = failed_output(rid, None, exc, kind)
        cb = None if on_token is None else (lambda ev: on_token(replace(ev, index=pos[ev.request_id]))
                                            if ev.request_id in pos else None)
        todo = set(pos)
        while todo:
            if not eng.has_unfinished():
                raise ColibriError(f"the engine finished without requests {sorted(map(str, todo))[:5]}")
            for out in eng.step(cb, on_step):
                if out.finished and out.request_id in todo:
                    results[pos[out.request_id]] = out
                    todo.discard(out.request_id)
                    if bar is not None:
                        bar.update(1)
    except BaseException:
        for rid in pos:
            eng.abort(rid)
        raise
    finally:
        if bar is not None:
            bar.close()
    return results


def _progress_bar(use_tqdm, total):
    if not use_tqdm:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)


def _hashable(x):
    return x if isinstance(x, (str, int, tuple)) else repr(x)


def _rids(request_ids, n):
    if request_ids is None:
        return list(range(n))
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
