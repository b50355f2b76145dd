"""Incremental detokenization for streaming: text deltas as tokens arrive, only complete UTF-8.

Role in the data flow: the scheduler feeds every generated token of a request to its Detokenizer
and streams (and checks stop strings on) the text it returns. The method is vLLM's/TGI's offset
window: decode the tokens from `prefix` on, subtract the decoded text of the tokens before `read`,
and emit the difference unless it ends in U+FFFD (an incomplete UTF-8 sequence of a byte-level
tokenizer). `finish()` returns what remains so that the emitted text equals
`tokenizer.decode(all_tokens, skip_special_tokens=True)`.
"""
from dataclasses import replace

from .safe_text import safe_decode


class TokenTexts:
    """Token id -> its text decoded alone (vLLM's Logprob.decoded_token: `tokenizer.decode([id])`,
    special tokens kept), cached; one per engine, shared by its requests."""

    def __init__(self, tokenizer):
        self.tokenizer, self.cache = tokenizer, {}
        self._special = None

    @property
    def special(self):
        """Ids of the tokenizer's special tokens (what skip_special_tokens drops before decoding)."""
        if self._special is None:
            try:
                added = self.tokenizer.get_added_tokens_decoder()
                self._special = frozenset(i for i, t in added.items() if getattr(t, "special", False))
            except AttributeError:          # not a `tokenizers` tokenizer: none known
                self._special = frozenset()
        return self._special

    def __call__(self, token_id):
        t = self.cache.get(token_id)
        if t is None:
            t = self.cache[token_id] = safe_decode(self.tokenizer, [int(token_id)], False)
        return t

    def fill(self, lp):
        """A TokenLogprobs with `decoded` ({id: text} of its chosen and top tokens) filled in."""
        ids = dict.fromkeys([lp.token_id] + [t for t, _ in lp.top])
        return replace(lp, decoded=tuple((t, self(t)) for t in ids))


class Detokenizer:
    def __init__(self, tokenizer, skip_special_tokens=True, texts=None):
        self.tokenizer = tokenizer
        self.texts = texts if texts is not None else TokenTexts(tokenizer)   # logprobs' decoded_token
        self.skip = skip_special_tokens
        self.skipped = None   # the special ids decoding drops (resolved at the first token, once)
        self.ids = []         # every token (finish() decodes them all once)
        self.window = []      # the tokens that can add text: all but the special ones skip_special_tokens drops
        self.prefix = 0       # first token of the decode window (one token of context for spacing)
        self.read = 0         # window tokens whose text has been emitted
        self.text = ""        # everything emitted so far

    def _decode(self, ids):
        return safe_decode(self.tokenizer, ids, self.skip)       # a failure: DecodeFailed, the request's error

    def add(self, token_id):
        """Append one token; return the newly completed text ("" when none). A special token that decoding
        skips never enters the window, so a run of them (12k repeated eos) costs O(1) each, not O(run)."""
        token_id = int(token_id)
        self.ids.append(token_id)
        skipped = self.skipped
        if skipped is None:
            skipped = self.skipped = self.texts.special if self.skip else frozenset()
        if token_id in skipped:
            return ""
        self.window.append(token_id)
        prefix_text = safe_decode(self.tokenizer, self.window[self.prefix:self.read], self.skip)   # raises
        #                                                               DecodeFailed: the request's error
        new_text = safe_decode(self.tokenizer, self.window[self.prefix:], self.skip)
        if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
            return ""
        if not new_text.startswith(prefix_text):
            return ""             # the window's text changed shape; wait, finish() reconciles
        delta = new_text[len(prefix_text):]
        self.prefix, self.read = self.read, len(self.window)
        self.text += delta
        return delta

    def finish(self):
        """The rest of the text (after the last add) such that self.text == decode(all ids)."""
        full = self._decode(self.ids)
        if full.startswith(self.text):
            delta = full[len(self.text):]
        else:                      # cannot happen for prefix-stable decoders; keep the exact final text
            delta = ""
        self.text = full
        self.read = len(self.window)
        return delta


class NullDetokenizer:
    """Used without a tokenizer (token-id prompts): no text (decoded_token stays None)."""
    text = ""
    texts = None

    def add(self, token_id):
        return ""

    def finish(self):
        return ""
