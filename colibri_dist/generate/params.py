"""SamplingParams: what one request asks of generation (vLLM names and meanings).

Role in the data flow: built by the caller (or from a job row's `sampling_params` dict with
`from_dict`), validated here once, then read by the sampler (temperature/top_k/top_p/seed/logprobs)
and the scheduler (max_tokens, stop conditions). Every invalid value raises InvalidArgument naming
the field.
"""
import math
from dataclasses import dataclass, fields

from ..errors import InvalidArgument


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class SamplingParams:
    """max_tokens: tokens to generate at most (>= 1).
    temperature: 0 = greedy (argmax, ties to the lowest token id); > 0 samples from softmax(logits / T).
    top_p: nucleus mass in (0, 1]; top_k: keep the k most likely tokens (0 or -1 = all).
    seed: request RNG seed (int >= 0); None = derived from the caller's base seed and the request id.
    stop: string or list of strings ending generation (not included in the text).
    stop_token_ids: token ids ending generation (kept in token_ids).
    ignore_eos: do not stop on the model's eos tokens.
    logprobs: 0 = none; n > 0 = per generated token the chosen token's logprob and the top n.
    """
    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: object = None
    stop: object = None
    stop_token_ids: object = None
    ignore_eos: bool = False
    logprobs: int = 0

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "max_tokens", _check_int("max_tokens", self.max_tokens, lo=1))
        set_(self, "temperature", _check_float("temperature", self.temperature, lo=0.0))
        top_p = _check_float("top_p", self.top_p, lo=0.0)
        if not 0.0 < top_p <= 1.0:
            raise InvalidArgument(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        set_(self, "top_p", top_p)
        set_(self, "top_k", _check_int("top_k", self.top_k, lo=-1))
        if self.seed is not None:
            set_(self, "seed", _check_int("seed", self.seed, lo=0))
        set_(self, "stop", _check_stop(self.stop))
        set_(self, "stop_token_ids", _check_token_ids(self.stop_token_ids))
        if not isinstance(self.ignore_eos, bool):
            raise InvalidArgument(f"SamplingParams.ignore_eos must be a bool, got {self.ignore_eos!r}")
        set_(self, "logprobs", _check_int("logprobs", self.logprobs, lo=0))

    @property
    def greedy(self):
        return self.temperature < 1e-5          # vLLM: below _SAMPLING_EPS is greedy

    @classmethod
    def from_dict(cls, data):
        """Build from a plain dict (a job row's `sampling_params`); unknown keys are rejected by name."""
        if isinstance(data, SamplingParams):
            return data
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise InvalidArgument(f"sampling_params must be a mapping, got {type(data).__name__}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise InvalidArgument(f"unknown sampling parameter {unknown[0]!r} (known: {', '.join(known)})")
        return cls(**data)

    def to_dict(self):
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["stop"] = list(self.stop)
        out["stop_token_ids"] = list(self.stop_token_ids)
        return out


def _check_int(name, value, lo):
    if not _is_int(value):
        raise InvalidArgument(f"SamplingParams.{name} must be an integer, got {value!r}")
    if value < lo:
        raise InvalidArgument(f"SamplingParams.{name} must be >= {lo}, got {value}")
    return int(value)


def _check_float(name, value, lo):
    if not _is_number(value) or not math.isfinite(value):
        raise InvalidArgument(f"SamplingParams.{name} must be a finite number, got {value!r}")
    if value < lo:
        raise InvalidArgument(f"SamplingParams.{name} must be >= {lo}, got {value}")
    return float(value)


def _check_stop(stop):
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, (list, tuple)):
        raise InvalidArgument(f"SamplingParams.stop must be a string or a list of strings, got {stop!r}")
    for s in items:
        if not isinstance(s, str) or not s:
            raise InvalidArgument(f"SamplingParams.stop entries must be non-empty strings, got {s!r}")
    return tuple(items)


def _check_token_ids(ids):
    if ids is None:
        return ()
    if not isinstance(ids, (list, tuple)):
        raise InvalidArgument(f"SamplingParams.stop_token_ids must be a list of token ids, got {ids!r}")
    for t in ids:
        if not _is_int(t) or t < 0:
            raise InvalidArgument(f"SamplingParams.stop_token_ids entries must be integers >= 0, got {t!r}")
    return tuple(int(t) for t in ids)
