"""Prompt -> token ids: the one place a prompt (text, token ids, or vLLM's prompt dict) becomes ids.

Role in the data flow: LLMEngine.add_request, LLM.generate/score (api.py) and the server's ModelInfo
encode every prompt here; text goes through safe_text.encode_or_error (bounded, errors name the request).
"""
from ..errors import InvalidArgument
from .safe_text import encode_or_error


def as_prompt_list(prompts):
    """One prompt (str, dict, or a flat list of token ids) or a list of them -> list of prompts."""
    if hasattr(prompts, "tolist") and not isinstance(prompts, (list, tuple)):
        prompts = prompts.tolist()
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if not isinstance(prompts, (list, tuple)):
        raise InvalidArgument(f"prompts must be a string, a list of token ids, or a list of those; "
                              f"got {type(prompts).__name__}", parameter="prompts")
    if prompts and all(_is_token(t) for t in prompts):
        return [list(prompts)]
    return list(prompts)


def encode_prompt(tokenizer, item, rid, add_special_tokens=True):
    """-> (token ids, None) or (None, InvalidArgument naming the request)."""
    if isinstance(item, dict):
        if "prompt_token_ids" in item:
            item = item["prompt_token_ids"]
        elif "prompt" in item:
            item = item["prompt"]
        else:
            return None, InvalidArgument(f"request {rid!r}: a prompt dict needs 'prompt' or 'prompt_token_ids'",
                                         parameter="prompt")
    if hasattr(item, "tolist") and not isinstance(item, (list, tuple, str)):
        item = item.tolist()
    if isinstance(item, str):
        if tokenizer is None:
            return None, InvalidArgument(f"request {rid!r}: a text prompt needs a tokenizer", parameter="prompt")
        return encode_or_error(tokenizer, item, f"request {rid!r}", add_special_tokens)
    if isinstance(item, (list, tuple)) and all(_is_token(t) for t in item):
        return [int(t) for t in item], None
    return None, InvalidArgument(f"request {rid!r}: a prompt must be a string or a list of token ids, "
                                 f"got {type(item).__name__}", parameter="prompt")


def _is_token(t):
    return (isinstance(t, int) and not isinstance(t, bool)) or type(t).__module__ == "numpy" and hasattr(t, "__index__")
