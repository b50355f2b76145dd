"""generate / chat / score: the entry points behind LLM.generate/chat/score (vLLM's shapes).

Role in the data flow: normalize prompts (str | token ids | {"prompt"} | {"prompt_token_ids"}) and
sampling params (one for all, or one per prompt, SamplingParams or dict), tokenize, hand every
request to one Scheduler over the given step model, return results in prompt order. A bad prompt
or bad per-request params give that request an `error` and the others go on; a wrong call shape
(e.g. a params list of the wrong length) raises InvalidArgument.
"""
from ..errors import InvalidArgument
from .outputs import Completion, Score
from .params import SamplingParams
from .safe_text import encode_or_error
from .scheduler import Scheduler


def generate(model, tokenizer, prompts, sampling_params=None, scheduler_config=None, on_token=None,
             request_ids=None, on_step=None):
    """-> list[Completion]; on_token(StreamEvent) is called for every generated token, on_step(StepStats)
    after every batched model call."""
    items = as_prompt_list(prompts)
    params = _params_list(sampling_params, len(items))
    sched = Scheduler(model, scheduler_config, tokenizer)
    for i, (item, sp) in enumerate(zip(items, params)):
        _add_generate(sched, tokenizer, item, sp, _rid(request_ids, i), add_special_tokens=True)
    return sched.run(on_token, on_step)


def chat(model, tokenizer, template, conversations, sampling_params=None, scheduler_config=None,
         on_token=None, request_ids=None, on_step=None):
    """Each conversation (a list of {"role", "content"}) rendered with `template` (a ChatTemplate) and
    add_generation_prompt=True, encoded without added special tokens, then generated."""
    convs = as_conversation_list(conversations)
    params = _params_list(sampling_params, len(convs))
    sched = Scheduler(model, scheduler_config, tokenizer)
    for i, (conv, sp) in enumerate(zip(convs, params)):
        rid = _rid(request_ids, i)
        try:
            text = template.render(conv, add_generation_prompt=True)
        except InvalidArgument as exc:
            sched.fail(Completion([], error=InvalidArgument(f"request {rid!r}: {exc}"), request_id=rid))
            continue
        _add_generate(sched, tokenizer, text, sp, rid, add_special_tokens=False)
    return sched.run(on_token, on_step)


def score(model, tokenizer, prompts, scheduler_config=None, request_ids=None, on_step=None):
    """-> list[Score]: log-probability of every prompt token after the first."""
    sched = Scheduler(model, scheduler_config, tokenizer)
    for i, item in enumerate(as_prompt_list(prompts)):
        rid = _rid(request_ids, i)
        ids, err = encode_prompt(tokenizer, item, rid, add_special_tokens=True)
        if err is not None:
            sched.fail(Score([], error=err, request_id=rid))
        else:
            sched.add_score(ids, rid)
    return sched.run(None, on_step)


# ---------------------------------------------------------------- normalization


def as_prompt_list(prompts):
    """One prompt (str, dict, or a flat list of token ids) or a list of them -> list of prompts."""
    if hasattr(prompts, "tolist") and not isinstance(prompts, (list, tuple)):
        prompts = prompts.tolist()
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if not isinstance(prompts, (list, tuple)):
        raise InvalidArgument(f"prompts must be a string, a list of token ids, or a list of those; "
                              f"got {type(prompts).__name__}")
    if prompts and all(_is_token(t) for t in prompts):
        return [list(prompts)]
    return list(prompts)


def as_conversation_list(conversations):
    if not isinstance(conversations, (list, tuple)):
        raise InvalidArgument("conversations must be a list of messages or a list of conversations")
    if conversations and all(isinstance(m, dict) for m in conversations):
        return [list(conversations)]
    return list(conversations)


def encode_prompt(tokenizer, item, rid, add_special_tokens=True):
    """-> (token ids, None) or (None, InvalidArgument naming the request)."""
    if isinstance(item, dict):
        if "prompt_token_ids" in item:
            item = item["prompt_token_ids"]
        elif "prompt" in item:
            item = item["prompt"]
        else:
            return None, InvalidArgument(f"request {rid!r}: a prompt dict needs 'prompt' or 'prompt_token_ids'")
    if hasattr(item, "tolist") and not isinstance(item, (list, tuple, str)):
        item = item.tolist()
    if isinstance(item, str):
        if tokenizer is None:
            return None, InvalidArgument(f"request {rid!r}: a text prompt needs a tokenizer")
        return encode_or_error(tokenizer, item, f"request {rid!r}", add_special_tokens)
    if isinstance(item, (list, tuple)) and all(_is_token(t) for t in item):
        return [int(t) for t in item], None
    return None, InvalidArgument(f"request {rid!r}: a prompt must be a string or a list of token ids, "
                                 f"got {type(item).__name__}")


def _add_generate(sched, tokenizer, item, sp, rid, add_special_tokens):
    ids, err = encode_prompt(tokenizer, item, rid, add_special_tokens)
    if err is None:
        try:
            sp = SamplingParams.from_dict(sp)
        except InvalidArgument as exc:
            err = InvalidArgument(f"request {rid!r}: {exc}")
    if err is not None:
        return sched.fail(Completion(ids or [], error=err, request_id=rid))
    return sched.add_generate(ids, sp, rid)


def _params_list(sampling_params, n):
    if sampling_params is None or isinstance(sampling_params, (SamplingParams, dict)):
        return [sampling_params] * n
    if isinstance(sampling_params, (list, tuple)):
        if len(sampling_params) != n:
            raise InvalidArgument(f"got {len(sampling_params)} sampling_params for {n} prompts")
        return list(sampling_params)
    raise InvalidArgument(f"sampling_params must be SamplingParams, a dict or a list of them, "
                          f"got {type(sampling_params).__name__}")


def _is_token(t):
    return (isinstance(t, int) and not isinstance(t, bool)) or type(t).__module__ == "numpy" and hasattr(t, "__index__")


def _rid(request_ids, i):
    return i if request_ids is None else request_ids[i]
