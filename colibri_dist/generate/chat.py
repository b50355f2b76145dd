"""Chat templates: render a conversation exactly as transformers' apply_chat_template(tokenize=False).

Role in the data flow: chat() in api.py renders each conversation to a prompt string here, then
encodes it without adding special tokens (the template writes them), as transformers does. Templates compile
and render in a worker process (template_process.py) with transformers' conventions: sandboxed, trim_blocks +
lstrip_blocks, loopcontrols, a `{% generation %}` block that just renders its body, `raise_exception`, `tojson`
(json.dumps, no HTML escaping), `strftime_now`, and the tokenizer's named special tokens (bos_token, eos_token,
...) as variables, plus messages/tools/documents/add_generation_prompt, all JSON data.
Rendering is bounded by the template's TemplateLimits (or a per-call one): the worker is killed at timeout_s,
stops writing past max_chars, and its memory is capped (template_process.memory_allowance). Whatever goes wrong
in a template (Jinja's errors, any Python exception it raises, an overrun) is one InvalidArgument naming the
template; KeyboardInterrupt / SystemExit propagate.
"""
import json
import os

from ..errors import InvalidArgument
from .safe_text import TemplateLimits, describe
from .template_process import RenderError, run, template_key

SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class ChatTemplate:
    def __init__(self, template, special_tokens=None, source="<chat template>", limits=None):
        """limits: the TemplateLimits every render() uses unless given its own (default TemplateLimits())."""
        if not isinstance(template, str) or not template:
            raise InvalidArgument(f"{source}: the chat template must be a non-empty string")
        self.source, self.limits = source, limits or TemplateLimits()
        self.special_tokens = {k: v for k, v in (special_tokens or {}).items() if v is not None}
        self.text, self._key = template, template_key(template)
        self._run({}, self.limits, compile_only=True)        # syntax errors now, and a worker started

    @classmethod
    def from_dir(cls, path):
        """From a saved tokenizer directory: chat_template.jinja, or tokenizer_config.json's chat_template."""
        cfg_path = os.path.join(path, "tokenizer_config.json")
        cfg = {}
        if os.path.exists(cfg_path):
            with open(cfg_path, encoding="utf-8") as f:
                cfg = json.load(f)
        jinja_path = os.path.join(path, "chat_template.jinja")
        text = None
        if os.path.exists(jinja_path):
            with open(jinja_path, encoding="utf-8") as f:
                text = f.read()
        return cls.from_config(cfg, text, source=path)

    @classmethod
    def from_config(cls, tokenizer_config, template_text=None, source="tokenizer_config.json"):
        template = template_text if template_text is not None else tokenizer_config.get("chat_template")
        if isinstance(template, list):    # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if not template:
            raise InvalidArgument(f"{source}: no chat template (tokenizer_config.json chat_template "
                                  f"or chat_template.jinja)")
        return cls(template, special_tokens_from_config(tokenizer_config), source=source)

    def render(self, messages, add_generation_prompt=True, tools=None, documents=None, limits=None, **kwargs):
        """The prompt text; InvalidArgument (naming the template) when the template rejects the messages,
        raises anything, or goes past `limits` (default: self.limits)."""
        if not isinstance(messages, (list, tuple)) or not messages:
            raise InvalidArgument("a conversation must be a non-empty list of {'role', 'content'} messages")
        for m in messages:
            if not isinstance(m, dict):
                raise InvalidArgument(f"chat messages must be dicts, got {m!r}")
        msgs = [{k: v for k, v in m.items() if v is not None} for m in messages]
        variables = {**self.special_tokens, **kwargs, "messages": msgs, "tools": tools, "documents": documents,
                     "add_generation_prompt": add_generation_prompt}
        return self._run(variables, limits or self.limits)

    def _run(self, variables, limits, compile_only=False):
        try:
            return run(self.text, variables, limits.timeout_s, limits.max_chars, limits.names, self._key, compile_only)
        except RenderError as exc:
            raise InvalidArgument(f"{self.source}: {exc}") from None
        except (TypeError, ValueError, RecursionError) as exc:      # json.dumps of what is not JSON data
            raise InvalidArgument(f"{self.source}: chat template input must be JSON data (str, number, bool, "
                                  f"None, list, dict): {describe(exc)}") from None


def renderer(template, add_generation_prompt=True, continue_final_message=False, tools=None, template_kwargs=None):
    """conversation -> prompt text, as vLLM's LLM.chat renders it (transformers' apply_chat_template):
    continue_final_message renders without the generation prompt and cuts the text after the last message's
    content, so the model goes on with it; it and add_generation_prompt exclude each other."""
    flags = (("add_generation_prompt", add_generation_prompt), ("continue_final_message", continue_final_message))
    for name, v in flags:
        if not isinstance(v, bool):
            raise InvalidArgument(f"{name} must be True or False, got {v!r}", parameter=name, value=v)
    if add_generation_prompt and continue_final_message:
        raise InvalidArgument("continue_final_message=True continues the last message; add_generation_prompt=True "
                              "starts a new one: pass add_generation_prompt=False with it",
                              parameter="continue_final_message", value=True)
    if template_kwargs is not None and not isinstance(template_kwargs, dict):
        raise InvalidArgument(f"chat_template_kwargs must be a dict, got {template_kwargs!r}",
                              parameter="chat_template_kwargs", value=template_kwargs)

    def render(conv):
        kw = dict(template_kwargs or {}, add_generation_prompt=add_generation_prompt, tools=tools)
        text = template.render(conv, **kw)
        return _cut_after_final(text, conv) if continue_final_message else text
    return render


def _cut_after_final(text, conv):
    last = conv[-1].get("content") if isinstance(conv[-1], dict) else None
    if not isinstance(last, str) or not last:
        raise InvalidArgument("continue_final_message needs a last message with text content",
                              parameter="continue_final_message", value=True)
    for final in (last, last.strip()):        # transformers' order: as given, then stripped (Llama 3 trims)
        i = text.rfind(final) if final else -1
        if i >= 0:
            return text[:i + len(final)]
    raise InvalidArgument("continue_final_message: the chat template does not write the last message's content "
                          "verbatim, so it cannot be continued", parameter="continue_final_message", value=True)


def special_tokens_from_config(cfg):
    """Named special tokens of a tokenizer_config.json (strings or AddedToken dicts) as strings."""
    out = {}
    for key in SPECIAL_TOKEN_KEYS:
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    return out
