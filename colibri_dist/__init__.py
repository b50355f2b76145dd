"""colibri-dist: Mixture-of-Experts inference across CPU servers.

Public API (see docs/ and DESIGN): convert, open_model, MoeExecutor, Pool and the
error classes. Heavy rooms load lazily so `import colibri_dist` stays cheap and
never imports ray unless Pool is used.
"""
from .errors import (ColibriError, ConfigError, FormatError, IntegrityError, InvalidArgument,
                     NativeError, NumericalError, PoolError, ResourceError, StoreError)

__all__ = ["convert", "open_model", "MoeExecutor", "Pool", "LLM", "SamplingParams", "StructuredOutputsParams", "TemplateLimits", "ColibriError",
           "FormatError", "ConfigError", "NativeError", "InvalidArgument", "StoreError", "PoolError",
           "IntegrityError", "ResourceError", "NumericalError"]
__version__ = "0.1.0"

_LAZY = {
    "convert": ("colibri_dist.format.convert", "convert"),
    "open_model": ("colibri_dist.format.reader", "open_model"),
    "MoeExecutor": ("colibri_dist.moe_executor", "MoeExecutor"),
    "Pool": ("colibri_dist.pool", "Pool"),
    "LLM": ("colibri_dist.model", "LLM"),
    "SamplingParams": ("colibri_dist.generate.params", "SamplingParams"),
    "StructuredOutputsParams": ("colibri_dist.generate.structured_params", "StructuredOutputsParams"),
    "TemplateLimits": ("colibri_dist.generate.safe_text", "TemplateLimits"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'colibri_dist' has no attribute {name!r}")
