"""The grammar room: structured outputs compiled by llguidance, one token mask per constrained sequence.

Role in the data flow: LLMEngine.add_request hands a request's StructuredOutputsParams to its engine's
Grammars, which compiles it on a background thread (`submit`: cached per constraint and tokenizer, so
the decode step never waits on a compile); each sample of the request gets a GrammarSlot. The scheduler
admits the request once its compile is done (`ready`), a failed compile fails the request alone with the
field named. Each step the scheduler asks the masks of every constrained sequence about to sample in one
batched call (`fill_masks`, llguidance's parallel executor, started before the model call and joined
after it); the request's Processors (logits.py) put -inf on every token the mask forbids, then the
sampler draws as usual, and the sampled token advances the matcher (`accept`). A mask is a function of
the request's own tokens, so a constrained request gives the same bits whatever runs beside it, and an
unconstrained neighbour is untouched.

llguidance (the `structured` extra) was chosen over xgrammar: no Python dependencies (xgrammar needs
torch, transformers, triton), masks computed lazily from a token trie (no per-schema pass over the
vocabulary), the same engine llama.cpp and vLLM's "guidance" backend run.
"""
import json
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..errors import InvalidArgument

MAX_CACHED = 256                   # compiled constraints kept per engine (least recently used dropped)
DEAD_END = "grammar_dead_end"      # finish_reason of a sequence whose grammar allows no next token


def llguidance():
    try:
        import llguidance as llg
    except ModuleNotFoundError:
        raise InvalidArgument("structured outputs need the 'structured' extra (llguidance): "
                              "pip install 'colibri-dist[structured]'", parameter="structured_outputs") from None
    return llg


def limits(llg):
    """Bounds on a compile and on each step's mask (llguidance's fuel and size limits): a schema that would
    compile for minutes is refused with an error instead."""
    return llg.LLParserLimits(initial_lexer_fuel=2_000_000, step_lexer_fuel=400_000, step_max_items=100_000,
                              max_grammar_size=200_000, max_lexer_states=100_000, verbose_errors=False)


def grammar_text(so, llg):
    """A StructuredOutputsParams -> llguidance's grammar text; InvalidArgument naming the field."""
    kind = so.kind
    try:
        if kind in ("json", "json_object"):
            schema = so.json if kind == "json" else {"type": "object"}
            return llg.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": not so.disable_any_whitespace})
        if kind == "regex":
            return llg.LLMatcher.grammar_from_regex(so.regex)
        if kind == "choice":
            return llg.LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in so.choice))
        text = so.grammar
        if "::=" in text:                          # GBNF, as llama.cpp writes grammars
            from llguidance.gbnf_to_lark import any_to_lark
            text = any_to_lark(text)
        return llg.LLMatcher.grammar_from_lark(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise InvalidArgument(f"structured_outputs.{kind}: cannot be compiled ({_first_line(exc)})",
                              parameter=f"structured_outputs.{kind}") from None


class Grammars:
    """The compiled constraints of one tokenizer (one per engine or server): compile, cache, mask."""

    def __init__(self, tokenizer_json, vocab_size, eos_token_ids):
        self._spec = (tokenizer_json, int(vocab_size), [int(t) for t in eos_token_ids])
        self._tokenizer = None
        self._cache = OrderedDict()                # StructuredOutputsParams.key() -> compiled matcher (a template)
        self._lock = threading.Lock()
        self._compiler = ThreadPoolExecutor(1, thread_name_prefix="colibri-grammar")
        self._masker = ThreadPoolExecutor(1, thread_name_prefix="colibri-mask")
        self._executor = None
        self.words = (int(vocab_size) + 31) // 32  # int32 words of one mask
        self.compiles = 0
        self.timing = {"fills": 0, "masks": 0, "fill_s": 0.0, "wait_s": 0.0}   # the structured-output benchmark's

    @classmethod
    def of_tokenizer(cls, tokenizer, vocab_size, eos_token_ids):
        if tokenizer is None or not hasattr(tokenizer, "to_str"):
            raise InvalidArgument("structured outputs need the model's tokenizer (tokenizer.json)",
                                  parameter="structured_outputs")
        return cls(tokenizer.to_str(), vocab_size, eos_token_ids)

    def llg_tokenizer(self):
        with self._lock:
            if self._tokenizer is None:
                llg = llguidance()
                text, n_vocab, eos = self._spec
                try:
                    self._tokenizer = llg.LLTokenizer(text, n_vocab=n_vocab, eos_token=eos or None)
                except (ValueError, TypeError) as exc:     # e.g. a WordPiece / WordLevel decoder
                    raise InvalidArgument(f"structured outputs cannot use this model's tokenizer "
                                          f"({_first_line(exc)})", parameter="structured_outputs") from None
                self._executor = llg.LLExecutor()
            return self._tokenizer

    def compile(self, so):
        """The compiled template matcher of a constraint (cached); InvalidArgument naming the field."""
        key = so.key()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        llg = llguidance()
        tokenizer = self.llg_tokenizer()
        matcher = llg.LLMatcher(tokenizer, grammar_text(so, llg), log_level=0, limits=limits(llg))
        if matcher.is_error():
            raise InvalidArgument(f"structured_outputs.{so.kind}: {_first_line(matcher.get_error())}",
                                  parameter=f"structured_outputs.{so.kind}")
        with self._lock:
            self.compiles += 1
            self._cache[key] = matcher
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
        return matcher

    def submit(self, so):
        """A Future of compile(so), on the compile thread (a cached constraint is done at once)."""
        with self._lock:
            hit = self._cache.get(so.key())
        if hit is not None:
            done = Future()
            done.set_result(hit)
            return done
        return self._compiler.submit(self.compile, so)

    def slot(self, future, after=None):
        return GrammarSlot(self, future, after)

    def start_fill(self, slots):
        """Compute the next-token masks of these started slots in one batched call, on the mask thread;
        -> a Future to join (None when there is nothing to fill)."""
        slots = [s for s in slots if s.matcher is not None and s.after is None and not s.fresh]
        if not slots:
            return None
        return _Fill(self, self._masker.submit(self._fill, slots))

    def _fill(self, slots):
        from llguidance.numpy import fill_next_token_bitmask_par
        t0 = time.perf_counter()
        bits = np.full((len(slots), self.words), -1, dtype=np.int32)
        fill_next_token_bitmask_par(self._executor, [(s.matcher, i) for i, s in enumerate(slots)], bits)
        for i, s in enumerate(slots):
            s.bits, s.fresh = bits[i], True
        t = self.timing
        t["fills"], t["masks"], t["fill_s"] = t["fills"] + 1, t["masks"] + len(slots), t["fill_s"] + time.perf_counter() - t0


class _Fill:
    """A batched mask fill in flight; join() waits for it (the time waited is counted)."""

    def __init__(self, grammars, future):
        self.grammars, self.future = grammars, future

    def join(self):
        t0 = time.perf_counter()
        self.future.result()
        self.grammars.timing["wait_s"] += time.perf_counter() - t0


class GrammarSlot:
    """One sequence's constraint: waits for its compile, then holds its matcher and its next mask. With
    `after` (the token ids of StructuredOutputsParams.start_after) it holds nothing until the output ends
    with those tokens; the constraint starts with the token after them."""

    def __init__(self, grammars, future, after=None):
        self.grammars, self.future = grammars, future
        self.matcher, self.bits, self.fresh = None, None, False
        self.after, self._tail = (list(after) if after else None), []
        self._early = []                   # tokens accepted before the compile finished (a resumed request)

    def ready(self):
        return self.matcher is not None or self.future.done()

    def wait(self, timeout):
        try:
            self.future.exception(timeout=timeout)
        except Exception:              # noqa: BLE001 (a timeout: the scheduler only waits a little)
            pass

    def start(self):
        """The sequence's own matcher (a copy of the compiled one); raises the compile's InvalidArgument."""
        if self.matcher is None:
            self.matcher = self.future.result().deep_copy()
            for t in self._early:
                self.accept(t)
        return self.matcher

    def mask(self):
        """int32 words of the next-token mask (bit t of the row = token t allowed); None while the
        constraint has not started (start_after)."""
        if self.after is not None:
            return None
        if not self.fresh:
            self.start()
            bits = np.full(self.grammars.words, -1, dtype=np.int32)
            self.matcher.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
            self.bits, self.fresh = bits, True
        if self.matcher.is_error():
            raise GrammarDeadEnd(f"structured_outputs: {_first_line(self.matcher.get_error())}")
        return self.bits

    def accept(self, token):
        token = int(token)
        if self.after is not None:         # not started: watch for start_after's tokens
            self._tail = (self._tail + [token])[-len(self.after):]
            if self._tail == self.after:
                self.after = None
            return
        if self.matcher is None:
            self._early.append(token)
            return
        self.fresh = False
        self.matcher.consume_token(token)

    def stopped(self):
        """The constraint is complete and allows nothing more (the sequence ends with "stop")."""
        return (self.after is None and self.matcher is not None and self.matcher.is_stopped()
                and not self.matcher.is_error())


class GrammarDeadEnd(Exception):
    """The constraint allows no next token: the sequence ends with finish_reason DEAD_END."""


# byte of a mask -> the 8 values added to its 8 logits: 0 for an allowed token, -inf for a forbidden one
_BYTE_TO_ADD = np.where((np.arange(256)[:, None] >> np.arange(8)) & 1, 0.0, -np.inf).astype(np.float32)


def apply_mask(x, words):
    """x (float32 row, modified in place) with every token the mask forbids at -inf (x + 0 is x, bit for
    bit; one gather of 8 values per mask byte: ~10x faster than a boolean index on a 152k row);
    GrammarDeadEnd when it forbids all of them."""
    if not words.any():
        raise GrammarDeadEnd("structured_outputs: the constraint allows no next token")
    mask, n = words.view(np.uint8), x.shape[0] // 8
    head = x[:n * 8].reshape(n, 8)
    np.add(head, _BYTE_TO_ADD.take(mask[:n], axis=0), out=head)
    if x.shape[0] > n * 8:
        x[n * 8:] += _BYTE_TO_ADD[mask[n]][:x.shape[0] - n * 8]
    return x


def _first_line(exc, limit=300):
    """llguidance's message on one line (its regex errors span several), at most `limit` characters."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    text = text or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."
