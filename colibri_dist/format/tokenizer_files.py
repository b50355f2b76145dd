"""Tokenizer files carried inside the container, so one .colibri is all a user ships.

Role in the data flow: convert() copies these checkpoint files, as text, into the metadata
JSON (`tokenizer_files`); Model.tokenizer_files() hands them back to the whole-model engine,
which builds a `tokenizers.Tokenizer` and reads the chat template and eos ids from them.
"""
import os

from ..errors import FormatError

FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json",
         "chat_template.jinja", "chat_template.json")
MAX_BYTES = 64 << 20


def tokenizer_files(src_dir):
    out = {}
    for name in FILES:
        path = os.path.join(src_dir, name)
        if not os.path.isfile(path):
            continue
        if os.path.getsize(path) > MAX_BYTES:
            raise FormatError(f"{path}: {os.path.getsize(path):,} bytes, larger than {MAX_BYTES:,} for a tokenizer file")
        try:
            with open(path, encoding="utf-8") as f:
                out[name] = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise FormatError(f"{path}: cannot read the tokenizer file ({exc})") from exc
    return out
