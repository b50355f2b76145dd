"""Chat templates: render a conversation exactly as transformers' apply_chat_template(tokenize=False).

Role in the data flow: chat() in api.py renders each conversation to a prompt string here, then
encodes it without adding special tokens (the template writes them), as transformers does. The
jinja2 environment copies transformers' conventions: sandboxed, trim_blocks + lstrip_blocks,
loopcontrols, a `{% generation %}` block that just renders its body, `raise_exception`, `tojson`
(json.dumps, no HTML escaping), `strftime_now`, and the tokenizer's named special tokens
(bos_token, eos_token, ...) as variables, plus messages/tools/documents/add_generation_prompt.
Rendering is bounded (template_sandbox.py) by the template's TemplateLimits (or a per-call one): time and the
characters written / built. Whatever goes wrong in a template (Jinja's errors, any Python exception it
raises, an overrun) is one InvalidArgument naming the template; KeyboardInterrupt / SystemExit propagate.
"""
import json
import os
from datetime import datetime

import jinja2
import jinja2.ext

from ..errors import InvalidArgument
from .safe_text import TemplateLimits, describe
from .template_sandbox import BoundedEnvironment, TemplateOverrun, bounded

SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class _Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (assistant-mask markers) renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


def _environment(limits):
    env = BoundedEnvironment(limits, trim_blocks=True, lstrip_blocks=True,
                             extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.seal()


class ChatTemplate:
    def __init__(self, template, special_tokens=None, source="<chat template>", limits=None):
        """limits: the TemplateLimits every render() uses unless given its own (default TemplateLimits())."""
        if not isinstance(template, str) or not template:
            raise InvalidArgument(f"{source}: the chat template must be a non-empty string")
        self.source, self.limits = source, limits or TemplateLimits()
        self.special_tokens = {k: v for k, v in (special_tokens or {}).items() if v is not None}
        check_sandbox()
        try:
            self._template = _environment(self.limits).from_string(template)
        except jinja2.TemplateSyntaxError as exc:
            raise InvalidArgument(f"{source}: chat template syntax error at line {exc.lineno}: {exc.message}") from None
        except Exception as exc:      # noqa: BLE001 - e.g. RecursionError from a deeply nested expression
            raise InvalidArgument(f"{source}: chat template cannot be compiled: {describe(exc)}") from None

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
        variables = {**self.special_tokens, **kwargs}
        try:
            with bounded(limits or self.limits):
                # Template.render without its handle_exception: rewriting a 1000-frame RecursionError
                # traceback into template frames costs more than the time bound
                ctx = self._template.new_context(dict(messages=msgs, tools=tools, documents=documents,
                                                      add_generation_prompt=add_generation_prompt, **variables))
                return "".join(self._template.root_render_func(ctx))
        except (jinja2.TemplateError, TemplateOverrun) as exc:
            raise InvalidArgument(f"{self.source}: chat template: {exc}") from None
        except Exception as exc:      # noqa: BLE001 - any Python error a template raises is the request's error
            raise InvalidArgument(f"{self.source}: chat template raised {describe(exc)}{_line(exc)}") from None


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


def _line(exc):
    """' (template line N)': the innermost frame of the compiled template in the traceback, mapped back."""
    tb, line = exc.__traceback__, None
    while tb is not None:
        template = tb.tb_frame.f_globals.get("__jinja_template__")
        if template is not None:
            line = template.get_corresponding_lineno(tb.tb_lineno)
        tb = tb.tb_next
    return f" (template line {line})" if line else ""


_SANDBOX_OK = []


def check_sandbox():
    """Once per process: the bounded code generator's hooks are in the code jinja generates (a jinja2 whose
    compiler changed would render unbounded: refuse instead)."""
    if _SANDBOX_OK:
        return
    src = _environment(TemplateLimits()).compile("{% for x in y %}a{{ x ~ x }}{% endfor %}", raw=True)
    missing = [h for h in ("environment.tick()", "environment.out_count(", "environment.concat_parts(")
               if h not in src]
    if missing:
        raise RuntimeError(f"jinja2 {jinja2.__version__}: the bounded chat-template sandbox is not in effect "
                           f"({', '.join(missing)} missing); use jinja2 3.1.x")
    _SANDBOX_OK.append(True)


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
