"""OpenAI response and stream-chunk objects from the engine's RequestOutputs.

Role in the data flow: the routes keep one Tracker per engine request (one prompt, n samples); each
RequestOutput the backend hands over (a delta: only what is new, from whichever engine client runs it) is
turned into the new part of every sample (`Tracker.deltas`), which the routes pack into chunks, or, at the
end, into one response.
Choice index = prompt index * n + sample index (OpenAI's order for a list of prompts with n).
"""
from dataclasses import dataclass

from . import logprobs as lpf

FINISH = {"eos": "stop", "stop": "stop", "length": "length", "abort": "abort", None: None}


@dataclass
class Delta:
    index: int                # OpenAI choice index
    text: str
    token_ids: list
    logprobs: list            # engine entries of token_ids (empty without logprobs)
    finish_reason: str | None
    stop_reason: object = None


class Tracker:
    def __init__(self, prompt_index, n, prompt_ids, prompt_text=None):
        """Fed the request's outputs as the backend hands them over: each only what is new (DELTA)."""
        self.prompt_index, self.n, self.prompt_ids, self.prompt_text = prompt_index, n, prompt_ids, prompt_text
        self.finished = set()
        self.completion_tokens = {}
        self.prompt_logprobs = None

    def deltas(self, out):
        if getattr(out, "prompt_logprobs", None) is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = out.prompt_logprobs           # the first output carries them
        got = []
        for o in out.outputs:
            j = getattr(o, "index", 0)
            if j in self.finished:
                continue
            ids = list(o.token_ids)
            reason = FINISH.get(o.finish_reason, o.finish_reason)
            got.append(Delta(self.prompt_index * self.n + j, o.text, ids, list(o.logprobs or []), reason,
                             getattr(o, "stop_reason", None)))
            self.completion_tokens[j] = self.completion_tokens.get(j, 0) + len(ids)
            if reason is not None:
                self.finished.add(j)
        return got

    @property
    def done(self):
        return len(self.finished) >= self.n


def usage(trackers, drop_generated=False):
    prompt = sum(len(t.prompt_ids) for t in trackers)
    completion = 0 if drop_generated else sum(sum(t.completion_tokens.values()) for t in trackers)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_choice(d, req, tracker, tok, first=True):
    """One /v1/completions choice (final, or a chunk's when first=False after the first chunk)."""
    text, ids, lps = d.text, d.token_ids, d.logprobs
    if req.max_tokens == 0:      # echo-only scoring request: the one token asked of the engine is dropped
        text, ids, lps = "", [], []
    lp = None
    if req.logprobs is not None:
        lp = lpf.completion_logprobs(tok, ids, lps, req.logprobs)
        if req.echo and first:
            head = lpf.completion_logprobs(tok, tracker.prompt_ids, _prompt_entries(tracker), req.logprobs)
            lp = {k: head[k] + lp[k] for k in lp}
            lp["text_offset"] = _offsets(lp["tokens"])
    if req.echo and first:
        text = (tracker.prompt_text or "") + text
    return {"index": d.index, "text": text, "logprobs": lp, "finish_reason": d.finish_reason,
            "stop_reason": d.stop_reason}


def _prompt_entries(tracker):
    lps = tracker.prompt_logprobs
    if lps is None:
        return [None] * len(tracker.prompt_ids)
    return list(lps) + [None] * (len(tracker.prompt_ids) - len(lps))


def _offsets(tokens):
    out, at = [], 0
    for t in tokens:
        out.append(at)
        at += len(t)
    return out


def chat_choice(d, req, tok, message=True, shaped=None):
    """shaped: (message or delta fields, finish_reason) of chat_output.ChoiceShaper; None = the text is
    the content and the engine's finish_reason stands."""
    lp = lpf.chat_logprobs(tok, d.token_ids, d.logprobs, req.top_logprobs) if req.logprobs else None
    fields, reason = shaped if shaped is not None else ({"content": d.text}, d.finish_reason)
    body = {"role": "assistant", **fields} if message else fields
    key = "message" if message else "delta"
    return {"index": d.index, key: body, "logprobs": lp, "finish_reason": reason, "stop_reason": d.stop_reason}


def merge_deltas(ds):
    """Deltas of one sample across several outputs -> one (text and tokens joined, the last finish)."""
    first = ds[0]
    return Delta(first.index, "".join(d.text for d in ds), [t for d in ds for t in d.token_ids],
                 [e for d in ds for e in d.logprobs], ds[-1].finish_reason, ds[-1].stop_reason)


def envelope(kind, rid, created, model, choices, use=None):
    obj = {"id": rid, "object": kind, "created": created, "model": model, "choices": choices}
    if use is not None:
        obj["usage"] = use
    return obj
