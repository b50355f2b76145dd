"""SamplingParams: what one request asks of generation (vLLM names, meanings and defaults).

Role in the data flow: built by the caller (or from a job row's `sampling_params` dict with
`from_dict`, over the model's generation_config.json defaults when given), validated here once,
then read by the logits processors (logits.py: penalties, min_tokens, allowed/bad tokens), the
sampler (temperature/min_p/top_k/top_p/seed/logprobs) and the request (max_tokens, stop
conditions, n). Every invalid value raises InvalidArgument naming the field (.parameter, .value).
"""
import enum
import math
from dataclasses import dataclass, fields

from ..errors import InvalidArgument
from .structured_params import StructuredOutputsParams

# generation_config.json keys vLLM's generation_config="auto" reads, and their SamplingParams names
GENERATION_CONFIG_KEYS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                          "repetition_penalty": "repetition_penalty", "max_new_tokens": "max_tokens"}


class RequestOutputKind(enum.IntEnum):
    """vLLM's: what each RequestOutput of a request carries while it runs."""
    CUMULATIVE = 0      # everything so far (the engine's default)
    DELTA = 1           # only what is new since the last output (text, token_ids, logprobs)
    FINAL_ONLY = 2      # no output until it is finished (what LLM.generate uses)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class SamplingParams:
    """n: samples per prompt (each its own RNG stream; sample 0 is what n=1 gives; each sample
    prefills the prompt itself: the KV blocks of the prompt are not shared between samples).
    max_tokens: tokens to generate at most (>= 1; None = up to max_seq_len). min_tokens: eos and
    stop_token_ids are masked (and stop strings not checked) until this many are generated.
    temperature: 0 = greedy (argmax, ties to the lowest token id); > 0 samples from softmax(logits / T).
    min_p: drop tokens whose probability is < min_p x the most likely one's; top_p: nucleus mass in
    (0, 1]; top_k: keep the k most likely tokens (0 or -1 = all).
    repetition_penalty: tokens of the prompt or the output have positive logits divided by it and the
    others multiplied (transformers' / vLLM's, 1 = off); presence_penalty / frequency_penalty:
    subtract p once / f x count for tokens already generated (OpenAI's, in [-2, 2]).
    seed: request RNG seed (int >= 0); None = derived from the engine's base seed and the request id.
    stop: string or list of strings ending generation (not in the text unless include_stop_str_in_output).
    stop_token_ids: token ids ending generation (kept in token_ids). ignore_eos: do not stop on eos.
    bad_words: words that may not be generated (each as its token sequences, vLLM's rule);
    allowed_token_ids: only these may be generated.
    logprobs: None = none; k >= 0 = per generated token the chosen token's logprob and the top k.
    prompt_logprobs: None = none; k >= 0 = per prompt token (after the first) its logprob and top k.
    skip_special_tokens: leave special tokens out of the text.
    output_kind: RequestOutputKind (or its name / value) of the engine's outputs for this request.
    structured_outputs: StructuredOutputsParams (or a dict of its fields): the output must match a JSON
    schema, regex, choice or grammar (tokens it does not allow are masked; generate/grammar.py).
    include_stop_str_in_output: the stop string that ended generation stays at the end of the text (vLLM's).
    detokenize: False = token ids only: no text and no decoded_token in logprobs (vLLM's; no stop strings).
    """
    n: int = 1
    max_tokens: int | None = 16
    min_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: object = None
    stop: object = None
    stop_token_ids: object = None
    ignore_eos: bool = False
    bad_words: object = None
    allowed_token_ids: object = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    structured_outputs: object = None
    include_stop_str_in_output: bool = False
    detokenize: bool = True

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "n", _check_int("n", self.n, lo=1))
        if self.max_tokens is not None:
            set_(self, "max_tokens", _check_int("max_tokens", self.max_tokens, lo=1))
        set_(self, "min_tokens", _check_int("min_tokens", self.min_tokens, lo=0))
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise InvalidArgument(f"SamplingParams.min_tokens ({self.min_tokens}) must be <= max_tokens "
                                  f"({self.max_tokens})", parameter="min_tokens", value=self.min_tokens)
        set_(self, "temperature", _check_float("temperature", self.temperature, lo=0.0))
        set_(self, "top_p", _check_float("top_p", self.top_p, lo=0.0, hi=1.0, open_lo=True))
        set_(self, "top_k", _check_int("top_k", self.top_k, lo=-1))
        set_(self, "min_p", _check_float("min_p", self.min_p, lo=0.0, hi=1.0))
        for name in ("presence_penalty", "frequency_penalty"):
            set_(self, name, _check_float(name, getattr(self, name), lo=-2.0, hi=2.0))
        set_(self, "repetition_penalty", _check_float("repetition_penalty", self.repetition_penalty,
                                                      lo=REPETITION_PENALTY[0], hi=REPETITION_PENALTY[1]))
        if self.seed is not None:
            set_(self, "seed", _check_int("seed", self.seed, lo=0))
        set_(self, "stop", _check_strings("stop", self.stop))
        set_(self, "stop_token_ids", _check_token_ids("stop_token_ids", self.stop_token_ids))
        set_(self, "bad_words", _check_strings("bad_words", self.bad_words))
        if self.allowed_token_ids is not None:
            ids = _check_token_ids("allowed_token_ids", self.allowed_token_ids)
            if not ids:
                raise InvalidArgument("SamplingParams.allowed_token_ids must not be empty (None = all tokens)",
                                      parameter="allowed_token_ids", value=self.allowed_token_ids)
            set_(self, "allowed_token_ids", ids)
        for name in ("ignore_eos", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgument(f"SamplingParams.{name} must be a bool, got {getattr(self, name)!r}",
                                      parameter=name, value=getattr(self, name))
        for name in ("logprobs", "prompt_logprobs"):
            if getattr(self, name) is not None:
                set_(self, name, _check_int(name, getattr(self, name), lo=0))
        set_(self, "output_kind", _check_output_kind(self.output_kind))
        set_(self, "structured_outputs", StructuredOutputsParams.of(self.structured_outputs))
        _check_text_options(self)

    @property
    def greedy(self):
        return self.temperature < 1e-5          # vLLM: below _SAMPLING_EPS is greedy

    @property
    def penalized(self):
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0

    @classmethod
    def from_dict(cls, data, defaults=None):
        """Build from a plain dict (a job row's `sampling_params`) over `defaults` (a dict, e.g. the
        model's generation_config defaults); unknown keys are rejected by name. A SamplingParams is
        returned as given (vLLM: an explicit object is used as is)."""
        if isinstance(data, SamplingParams):
            return data
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InvalidArgument(f"sampling_params must be a mapping, got {type(data).__name__}",
                                  parameter="sampling_params", value=data)
        known = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise InvalidArgument(f"unknown sampling parameter {unknown[0]!r} (known: {', '.join(known)})",
                                  parameter=unknown[0], value=data[unknown[0]] if unknown[0] in data else None)
        return cls(**{**(defaults or {}), **data})

    def to_dict(self):
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("stop", "stop_token_ids", "bad_words"):
            out[name] = list(out[name])
        if out["allowed_token_ids"] is not None:
            out["allowed_token_ids"] = list(out["allowed_token_ids"])
        if out["structured_outputs"] is not None:
            out["structured_outputs"] = out["structured_outputs"].to_dict()
        return out


def generation_defaults(generation_config, where="generation_config.json"):
    """The SamplingParams defaults a model's generation_config.json gives (vLLM's generation_config=
    "auto": temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens -> max_tokens), each
    checked; InvalidArgument naming the file and key for a bad one."""
    out = {}
    for key, name in GENERATION_CONFIG_KEYS.items():
        value = (generation_config or {}).get(key)
        if value is None:
            continue
        try:
            SamplingParams(**{name: value, **({"min_tokens": 0} if name == "max_tokens" else {})})
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {key}: {exc}", parameter=key, value=value) from None
        out[name] = value
    return out


def _check_text_options(p):
    for name in ("include_stop_str_in_output", "detokenize"):
        if not isinstance(getattr(p, name), bool):
            raise InvalidArgument(f"SamplingParams.{name} must be a bool, got {getattr(p, name)!r}",
                                  parameter=name, value=getattr(p, name))
    if p.stop and not p.detokenize:
        raise InvalidArgument("SamplingParams.stop strings are matched in the text: they need detokenize=True "
                              "(stop_token_ids work without it)", parameter="detokenize", value=False)


def _check_output_kind(value):
    if isinstance(value, str) and value.upper() in RequestOutputKind.__members__:
        return RequestOutputKind[value.upper()]
    if _is_int(value) and value in set(RequestOutputKind):
        return RequestOutputKind(value)
    raise InvalidArgument(f"SamplingParams.output_kind must be one of {[k.name.lower() for k in RequestOutputKind]}, "
                          f"got {value!r}", parameter="output_kind", value=value)


def _check_int(name, value, lo):
    if not _is_int(value):
        raise InvalidArgument(f"SamplingParams.{name} must be an integer, got {value!r}", parameter=name, value=value)
    if value < lo:
        raise InvalidArgument(f"SamplingParams.{name} must be >= {lo}, got {value}", parameter=name, value=value)
    return int(value)


def _check_float(name, value, lo, hi=None, open_lo=False):
    if not _is_number(value) or not math.isfinite(value):
        raise InvalidArgument(f"SamplingParams.{name} must be a finite number, got {value!r}", parameter=name,
                              value=value)
    if value < lo or (open_lo and value == lo) or (hi is not None and value > hi):
        rng = f"{'(' if open_lo else '['}{lo}, {hi if hi is not None else 'inf'}{']' if hi is not None else ')'}"
        raise InvalidArgument(f"SamplingParams.{name} must be in {rng}, got {value}", parameter=name, value=value)
    return float(value)


def _check_strings(name, value):
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise InvalidArgument(f"SamplingParams.{name} must be a string or a list of strings, got {value!r}",
                              parameter=name, value=value)
    for s in items:
        if not isinstance(s, str) or not s:
            raise InvalidArgument(f"SamplingParams.{name} entries must be non-empty strings, got {s!r}",
                                  parameter=name, value=value)
    return tuple(items)


def _check_token_ids(name, ids):
    if ids is None:
        return ()
    if not isinstance(ids, (list, tuple)):
        raise InvalidArgument(f"SamplingParams.{name} must be a list of token ids, got {ids!r}", parameter=name,
                              value=ids)
    for t in ids:
        if not _is_int(t) or t < 0:
            raise InvalidArgument(f"SamplingParams.{name} entries must be integers >= 0, got {t!r}", parameter=name,
                                  value=ids)
    return tuple(int(t) for t in ids)


# repetition_penalty divides (or multiplies) float32 logits: within this range no finite logit of a model
# overflows by it (1e-300 was accepted, became 0 in float32 and failed the request as "logits not finite")
REPETITION_PENALTY = (0.01, 100.0)
TOKEN_ID_PARAMS = ("allowed_token_ids", "stop_token_ids")     # the SamplingParams fields that hold token ids


def check_token_ids_in_vocab(params, vocab_size):
    """Every token-id parameter of params within [0, vocab_size): the request boundary's check (the engine's
    add_request, the server before its response starts), so no id reaches a logits row out of range."""
    for name in TOKEN_ID_PARAMS:
        bad = next((t for t in getattr(params, name) or () if t >= vocab_size), None)
        if bad is not None:
            raise InvalidArgument(f"SamplingParams.{name}: {bad} is outside the vocabulary [0, {vocab_size})",
                                  parameter=name, value=bad)
    return params


MAX_LOGPROBS = 20          # vLLM's default max_logprobs: the most logprobs / prompt_logprobs one request may ask


def check_logprobs(params, max_logprobs):
    """logprobs and prompt_logprobs of params at most the engine's max_logprobs (vLLM's rule, checked at the
    request boundary: LLMEngine.add_request; the server checks its fields against the same number)."""
    for name in ("logprobs", "prompt_logprobs"):
        k = getattr(params, name)
        if k is not None and k > max_logprobs:
            raise InvalidArgument(f"SamplingParams.{name}: {k} is more than this engine's max_logprobs "
                                  f"{max_logprobs} (vLLM's limit: LLM(max_logprobs=N), colibri serve --max-logprobs N)",
                                  parameter=name, value=k)
    return params
