"""Logprobs in OpenAI's two shapes, from the engine's per-token entries.

Role in the data flow: responses.py calls `completion_logprobs` (the legacy /v1/completions object:
tokens, token_logprobs, top_logprobs, text_offset; prompt tokens first with echo) and `chat_logprobs`
(/v1/chat/completions: content[{token, logprob, bytes, top_logprobs}]). An engine entry is either a
TokenLogprobs (token_id, logprob, rank, top ((id, lp), ...)) or vLLM's {token_id: Logprob | float};
`None` (the first prompt token) stays None. Non-finite logprobs are sent as -9999.0, as vLLM does.
"""
import math


def entry(e, chosen):
    """-> (logprob of `chosen`, [(id, logprob), ...] most likely first) or None."""
    if e is None:
        return None
    if hasattr(e, "top") and hasattr(e, "logprob"):
        return _finite(e.logprob), [(int(i), _finite(lp)) for i, lp in e.top]
    if isinstance(e, dict):
        pairs = [(int(i), _finite(getattr(v, "logprob", v))) for i, v in e.items()]
        ranked = sorted(pairs, key=lambda p: (-p[1], p[0]))
        chosen_lp = dict(pairs).get(int(chosen))
        return chosen_lp, ranked
    raise TypeError(f"unknown logprob entry {type(e).__name__}")


def _finite(v):
    v = float(v)
    return v if math.isfinite(v) else -9999.0


class TokenText:
    """Token id -> its text (decoded alone, special tokens kept), cached."""

    def __init__(self, tokenizer):
        self.tokenizer, self.cache = tokenizer, {}

    def __call__(self, token_id):
        t = self.cache.get(token_id)
        if t is None:
            t = self.tokenizer.decode([token_id], skip_special_tokens=False) if self.tokenizer else f"token_id:{token_id}"
            self.cache[token_id] = t
        return t


def completion_logprobs(tok, ids, entries, k, offset0=0):
    """Legacy object over tokens `ids` with their `entries` (same length); top k plus the chosen token."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    offset = offset0
    for token_id, e in zip(ids, entries):
        text = tok(token_id)
        got = entry(e, token_id)
        out["tokens"].append(text)
        out["text_offset"].append(offset)
        offset += len(text)
        if got is None:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        lp, ranked = got
        top = {}
        for i, v in ranked[:k]:
            top.setdefault(tok(i), v)
        if lp is not None:
            top.setdefault(text, lp)
        out["token_logprobs"].append(lp)
        out["top_logprobs"].append(top)
    return out


def chat_logprobs(tok, ids, entries, k):
    content = []
    for token_id, e in zip(ids, entries):
        lp, ranked = entry(e, token_id)
        text = tok(token_id)
        content.append({"token": text, "logprob": lp, "bytes": list(text.encode("utf-8", "surrogatepass")),
                        "top_logprobs": [{"token": tok(i), "logprob": v,
                                          "bytes": list(tok(i).encode("utf-8", "surrogatepass"))}
                                         for i, v in ranked[:k]]})
    return {"content": content}
