"""ServerState: what every route needs — config, backend, model facts, metrics — and the request checks
that need the model (model name, prompt tokens, context length, SamplingParams).

Role in the data flow: launch.py builds one ServerState around an opened model and a started backend;
app.py's routes call its methods. Tokenization matches LLM.generate/chat exactly (generate/api.py
encode_prompt: special tokens added to completion prompts; chat prompts rendered by the model's template
and encoded without them), so a request's tokens are the ones LLM.generate would see.
"""
import os
import re
import time

from ..errors import InvalidArgument
from ..generate.params import check_token_ids_in_vocab
from . import reasoning, tools
from .errors import APIError, bad_param


class ModelInfo:
    """Model facts the server needs, from a cd.LLM (or anything with the same attributes)."""

    def __init__(self, llm, params_cls, encode_prompt, defaults=None, public_name="the model"):
        """public_name: what error texts say instead of the model's filesystem path (the served name)."""
        self.llm, self.params_cls, self._encode = llm, params_cls, encode_prompt
        self.defaults = dict(defaults or {})          # the model's generation_config sampling defaults
        self.tokenizer = getattr(llm, "tokenizer", None)
        self.vocab_size, self.max_seq_len = llm.vocab_size, llm.max_seq_len
        self.family = _family(llm)                    # the container's model_type (picks a tool-call parser)
        self._grammars = None
        self.public_name = public_name
        path = getattr(llm, "path", None)
        hidden = {path, os.path.abspath(path), os.path.realpath(path)} if isinstance(path, str) and path else set()
        self._hidden = sorted(hidden, key=len, reverse=True)

    def grammars(self):
        """The served tokenizer's compiled structured-output constraints (generate/grammar.py), made once."""
        if self._grammars is None:
            from ..generate.grammar import Grammars
            self._grammars = Grammars.of_tokenizer(self.tokenizer, self.vocab_size,
                                                   getattr(self.llm, "eos_token_ids", ()))
        return self._grammars

    def public(self, text):
        """text with the model's filesystem path replaced by its served name: a client never learns where
        the server keeps its files (every model-dependent 400 goes through here)."""
        text = str(text)
        for p in self._hidden:
            text = text.replace(p, self.public_name)
        return text

    def chat_template(self):
        try:
            return self.llm.chat_template
        except InvalidArgument as exc:
            raise APIError(400, f"this model has no chat template ({self.public(exc)}); use /v1/completions",
                           param="messages", code="no_chat_template") from None

    def render_chat(self, messages, add_generation_prompt=True, tools=None):
        """The chat template's text of messages (and the function tools, as the template writes them); what
        the template rejects (its raise_exception, a bound, a type it cannot render) is a 400 naming
        messages, on every route that renders (chat, /tokenize)."""
        template = self.chat_template()
        try:
            return template.render(messages, add_generation_prompt=add_generation_prompt, tools=tools)
        except APIError:
            raise
        except Exception as exc:
            raise APIError(400, f"messages: the chat template rejected them ({self.public(exc)})",
                           param="messages") from None

    def encode(self, prompt, add_special_tokens, param="prompt"):
        try:
            ids, err = self._encode(self.tokenizer, prompt, 0, add_special_tokens=add_special_tokens)
        except Exception as exc:         # the Rust tokenizer on odd text (lone surrogates, ...)
            raise bad_param(param, f"cannot be tokenized ({type(exc).__name__})") from None
        if err is not None:
            raise bad_param(param, self.public(err).replace("request 0: ", ""))
        if not ids:
            raise bad_param(param, "is empty after tokenization")
        bad = next((t for t in ids if t >= self.vocab_size), None)
        if bad is not None:
            raise bad_param(param, f"token id {bad} is outside the vocabulary [0, {self.vocab_size})")
        return ids

    def decode(self, ids):
        return self.tokenizer.decode(list(ids), skip_special_tokens=True) if self.tokenizer else ""


def _family(llm):
    try:
        return llm.executor.model.config.family
    except AttributeError:
        return None


class ServerState:
    def __init__(self, cfg, backend, info, metrics, admin=None):
        self.cfg, self.backend, self.info, self.metrics, self.admin = cfg, backend, info, metrics, admin
        self.tool_parser = tools.parser_for(getattr(cfg, "tool_call_parser", None), info.family)
        self.reasoning = reasoning.PARSERS.get(getattr(cfg, "reasoning_parser", None))   # (start, end) markers
        self.names = cfg.model_names
        self.max_logprobs = cfg.engine_args().max_logprobs      # the engine's limit, checked on the fields
        self.created = int(time.time())
        self.t_started = time.perf_counter()

    def check_model(self, name):
        if name is None or name in self.names:
            return self.names[0]
        raise APIError(404, f"the model {name!r} does not exist; this server serves {', '.join(self.names)}",
                       param="model", code="model_not_found")

    def max_tokens_for(self, asked, prompt_len, param="max_tokens"):
        """Checked max_tokens (None = as many as the context allows, capped by --max-tokens-limit)."""
        ctx = self.info.max_seq_len
        limit = self.cfg.max_tokens_limit or ctx
        if prompt_len >= ctx:
            raise bad_param("prompt", f"this model's maximum context length is {ctx} tokens; the prompt has "
                            f"{prompt_len}")
        if asked is None:
            asked = self.info.defaults.get("max_tokens") or limit
            return min(ctx - prompt_len, limit, asked)
        if asked > limit:
            raise bad_param(param, f"must be <= {limit} (the server's limit), got {asked}")
        if prompt_len + asked > ctx:
            raise bad_param(param, f"this model's maximum context length is {ctx} tokens; you requested "
                            f"{prompt_len + asked} ({prompt_len} in the prompt, {asked} in the completion)")
        return asked

    def params(self, sampling, max_tokens):
        fields = dict(sampling, max_tokens=max(1, max_tokens))
        try:
            return check_token_ids_in_vocab(self.info.params_cls.from_dict(fields, self.info.defaults),
                                            self.info.vocab_size)
        except InvalidArgument as exc:
            raise bad_param(exc.parameter or "sampling", self.info.public(exc)) from None
        except TypeError as exc:
            m = re.search(r"'(\w+)'", str(exc))
            name = m.group(1) if m else "sampling"
            raise bad_param(name, "is not supported by this server's engine") from None
