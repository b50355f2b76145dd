"""Generation room: sampling parameters, per-request samplers, the continuous-batching scheduler,
incremental detokenization, chat templates and the generate/chat/score entry points.

Everything here works against a duck-typed step model (see scheduler.py, "StepModel protocol");
the whole-model engine is passed in, never imported.
"""
from .outputs import Completion, RequestMetrics, Score, StepStats, StreamEvent, TokenLogprobs
from .params import SamplingParams
from .scheduler import SchedulerConfig

__all__ = ["Completion", "RequestMetrics", "SamplingParams", "SchedulerConfig", "Score", "StepStats", "StreamEvent",
           "TokenLogprobs"]
