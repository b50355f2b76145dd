"""The tokenizer, chat template and eos ids a container carries (format/tokenizer_files.py).

Role in the data flow: LLM builds a `tokenizers.Tokenizer` from the copied tokenizer.json, reads
tokenizer_config.json (the chat template is generate/chat.py's) and the eos ids from
generation_config.json (falling back to tokenizer_config's eos_token). Damaged files are a
FormatError naming the container and the file.
"""
import json

from ..errors import FormatError


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
    try:
        return Tokenizer.from_str(files["tokenizer.json"])
    except Exception as exc:       # the Rust side raises its own Exception type
        raise FormatError(f"{where}: tokenizer.json inside the container cannot be loaded ({exc})") from exc


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
