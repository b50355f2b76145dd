"""Generation room: sampling parameters, logits processors, per-request samplers, the continuous-batching
scheduler, the persistent LLMEngine that drives it, incremental detokenization, chat templates, and
the generate/chat/score entry points.

Everything here works against a duck-typed step model (see scheduler.py, "StepModel protocol");
the whole-model engine is passed in, never imported.
"""
from .engine import LLMEngine
from .outputs import (Completion, CompletionOutput, Logprob, RequestMetrics, RequestOutput, Score, StepStats,
                      StreamEvent, TokenLogprobs)
from .params import RequestOutputKind, SamplingParams
from .scheduler import SchedulerConfig
from .structured_params import StructuredOutputsParams

__all__ = ["Completion", "CompletionOutput", "LLMEngine", "Logprob", "RequestMetrics", "RequestOutput", "RequestOutputKind",
           "SamplingParams", "SchedulerConfig", "StructuredOutputsParams", "Score", "StepStats", "StreamEvent", "TokenLogprobs"]
