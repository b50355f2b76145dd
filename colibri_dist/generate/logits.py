"""Per-request logits processors: allowed tokens, bad words, min_tokens, repetition / frequency /
presence penalties (vLLM's SamplingParams semantics, transformers' arithmetic).

Role in the data flow: the Sampler (sampler.py) asks a request's Processors for the row it samples
from (`apply(raw logits)`), after every sampled token the request reports it (`accept`). The raw
row is never modified: logprobs are reported from it (vLLM's default raw_logprobs). The order is
vLLM's: the structured-output mask (grammar.py), masks (allowed_token_ids, bad_words, min_tokens: eos and stop_token_ids at -inf until
min_tokens are out), then repetition_penalty over the prompt's and the output's tokens (positive
logits divided by it, others multiplied, in float32 as transformers' RepetitionPenaltyLogitsProcessor),
then frequency_penalty x count and presence_penalty over the output's tokens. Every step is a
function of this request's tokens alone, so batching never changes a bit.
"""
import numpy as np

from .grammar import GrammarDeadEnd, apply_mask
from .sampler_fast import LONG_ROW, workspace


class Processors:
    def __init__(self, params, prompt, eos_token_ids=(), bad_words_ids=(), grammar=None):
        self.p = params
        self.grammar = grammar             # a GrammarSlot (grammar.py) of a structured-output request
        self.allowed = None if params.allowed_token_ids is None else np.asarray(params.allowed_token_ids, np.int64)
        self.bad = [list(b) for b in bad_words_ids]
        stops = set(params.stop_token_ids) | (set() if params.ignore_eos else set(eos_token_ids))
        self.min_stop = np.asarray(sorted(stops), np.int64) if params.min_tokens and stops else None
        self.counts = {}                   # output token -> times generated
        self.seen = list(dict.fromkeys(int(t) for t in prompt)) if params.repetition_penalty != 1.0 else []
        self._seen_set = set(self.seen)
        self._seen_ids = None
        self.n_out = 0
        self.active = (self.allowed is not None or bool(self.bad) or self.min_stop is not None or params.penalized
                       or grammar is not None)

    def accept(self, token):
        if self.grammar is not None:
            self.grammar.accept(token)
        self.n_out += 1
        self.counts[token] = self.counts.get(token, 0) + 1
        if self.p.repetition_penalty != 1.0 and token not in self._seen_set:
            self._seen_set.add(token)
            self.seen.append(token)

    def apply(self, logits, output):
        """The row to sample from (a float32 copy when anything applies, else `logits` itself; a long
        row's copy is this thread's scratch buffer, valid until the next apply)."""
        if not self.active:
            return logits
        x = _scratch_copy(logits)
        words = self.grammar.mask() if self.grammar is not None else None
        if words is not None:
            apply_mask(x, words)
        if self.allowed is not None:
            keep = x[self.allowed]
            x[:] = -np.inf
            x[self.allowed] = keep
        if self.bad:
            x[self._banned(output)] = -np.inf
        if self.min_stop is not None and self.n_out < self.p.min_tokens:
            x[self.min_stop] = -np.inf
        if words is not None and x.max() == -np.inf:
            raise GrammarDeadEnd("structured_outputs: the constraint and the request's other masks allow no token")
        return self._penalize(x)

    def _banned(self, output):
        out = []
        for word in self.bad:
            k = len(word) - 1
            if k == 0 or (len(output) >= k and output[len(output) - k:] == word[:k]):
                out.append(word[-1])
        return np.asarray(out, np.int64)

    def _penalize(self, x):
        p = self.p
        if p.repetition_penalty != 1.0 and self.seen:
            if self._seen_ids is None or self._seen_ids.shape[0] != len(self.seen):
                self._seen_ids = np.asarray(self.seen, np.int64)      # rebuilt only when a token is new
            ids = self._seen_ids
            s = x[ids]
            pen = np.float32(p.repetition_penalty)
            x[ids] = np.where(s < 0, s * pen, s / pen)
        if self.counts and (p.frequency_penalty != 0.0 or p.presence_penalty != 0.0):
            ids = np.fromiter(self.counts.keys(), np.int64, len(self.counts))
            s = x[ids]                         # (logit - frequency x count) - presence, in float32
            if p.frequency_penalty != 0.0:
                s = s - np.float32(p.frequency_penalty) * np.fromiter(self.counts.values(), np.float32,
                                                                      len(self.counts))
            if p.presence_penalty != 0.0:
                s = s - np.float32(p.presence_penalty)
            x[ids] = s
        return x


def _scratch_copy(logits):
    """A float32 copy of the row; long rows go to this thread's reused buffer (the sampler reads it
    before the next apply), short ones to a fresh array."""
    row = np.asarray(logits)
    if row.ndim == 1 and row.shape[0] > LONG_ROW:
        out = workspace(row.shape[0]).x
        out[:] = row
        return out
    return np.array(row, dtype=np.float32)


def bad_words_token_ids(bad_words, tokenizer):
    """vLLM's rule: each word encoded as given (left-stripped) and with a leading space, the second kept
    when it is a different word of the same length; -> list of token id lists."""
    out = []
    for word in bad_words:
        for prefix in ("", " "):
            enc = tokenizer.encode(prefix + word.lstrip(), add_special_tokens=False)
            ids = list(getattr(enc, "ids", enc))
            if not ids:
                continue
            if not prefix or (out and ids[0] != out[-1][0] and len(ids) == len(out[-1])):
                out.append(ids)
    return out


def min_p_mask(z, min_p):
    """z (float32, already divided by the temperature) with tokens whose probability is below min_p x
    the most likely one's at -inf (transformers' MinPLogitsWarper / vLLM: p_i < min_p * p_max)."""
    e = np.exp(z - z.max())
    return np.where(e >= np.float32(min_p), z, np.float32(-np.inf)).astype(np.float32)
