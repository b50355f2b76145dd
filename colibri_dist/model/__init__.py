"""Whole-model room: attention, KV cache and the decoder stack over the MoE engine (cd.LLM).

Sits above engine/ (MoE layers, expert store) and native/ (the ops), below pool/, jobs/ and cli/.
"""
from .kv_cache import KVCacheFull
from .llm import LLM

__all__ = ["LLM", "KVCacheFull"]
