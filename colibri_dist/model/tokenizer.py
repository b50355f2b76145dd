"""The tokenizer, chat template and eos ids a container carries (format/tokenizer_files.py).

Role in the data flow: LLM builds a `tokenizers.Tokenizer` from the copied tokenizer.json, reads
tokenizer_config.json (the chat template is generate/chat.py's) and the eos ids from
generation_config.json (falling back to tokenizer_config's eos_token); hf_tokenizer wraps them in
transformers' PreTrainedTokenizerFast for LLM.get_tokenizer(). Damaged files are a FormatError naming
the container and the file.
"""
import json

from ..errors import FormatError
from ..generate.safe_text import tokenizer_call


def _json(files, name, where):
    if name not in files:
        return {}
    try:
        value = json.loads(files[name])
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"{where}: {name} inside the container is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise FormatError(f"{where}: {name} inside the container is not a JSON object")
    return value


def load_tokenizer(files, where):
    if "tokenizer.json" not in files:
        return None
    from tokenizers import Tokenizer
    return tokenizer_call(Tokenizer.from_str, files["tokenizer.json"], fail=lambda why: FormatError(
        f"{where}: tokenizer.json inside the container cannot be loaded ({why})"))


def hf_tokenizer(tokenizer, config, template_text, max_len):
    """transformers' PreTrainedTokenizerFast over the container's tokenizer.json and tokenizer_config.json
    (special tokens, chat template, max length): what vLLM's LLM.get_tokenizer() returns. None when
    transformers is not installed (or there is no tokenizer)."""
    if tokenizer is None:
        return None
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        return None
    from ..generate.chat import special_tokens_from_config
    kw = special_tokens_from_config(config)
    template = template_text if template_text is not None else config.get("chat_template")
    if isinstance(template, str) and template:
        kw["chat_template"] = template
    if isinstance(config.get("clean_up_tokenization_spaces"), bool):
        kw["clean_up_tokenization_spaces"] = config["clean_up_tokenization_spaces"]
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=max_len, **kw)


def tokenizer_config(files, where):
    return _json(files, "tokenizer_config.json", where)


def generation_config(files, where):
    return _json(files, "generation_config.json", where)


def eos_token_ids(files, tokenizer, where):
    eos = _json(files, "generation_config.json", where).get("eos_token_id")
    if eos is None:
        token = tokenizer_config(files, where).get("eos_token")
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str) and tokenizer is not None:
            eos = tokenizer.token_to_id(token)
    if eos is None:
        return ()
    ids = eos if isinstance(eos, list) else [eos]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise FormatError(f"{where}: eos_token_id {eos!r} must be a non-negative integer or a list of them")
    return tuple(ids)
