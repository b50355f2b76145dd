"""llama.cpp's UNUSED vocabulary rows (the `[PADn]` tokens convert_hf_to_gguf.py pads a vocabulary with,
token_type 5) leave decoded text as llama.cpp's token_to_piece leaves them (empty), while ordinary text still
tokenizes exactly as before. A metadata source built in memory: no GGUF file, no llama.cpp needed."""
import json

import pytest

pytest.importorskip("tokenizers")
from tokenizers import Tokenizer, pre_tokenizers  # noqa: E402

from colibri_dist.format.gguf_tokenizer import tokenizer_files  # noqa: E402

BYTES = pre_tokenizers.ByteLevel.alphabet()


class Source:
    path = "mem.gguf"

    def __init__(self, fields):
        self.fields = fields

    def field(self, key, default=None):
        return self.fields.get(key, default)


def source(with_unused):
    tokens = sorted(BYTES) + ["he", "hel", "hell", "hello", "<|endoftext|>", "[PAD0]", "[PAD1]"]
    types = [1] * (len(tokens) - 3) + [3, 5 if with_unused else 1, 5 if with_unused else 1]
    return Source({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2", "tokenizer.ggml.tokens": tokens,
                   "tokenizer.ggml.merges": ["h e", "he l", "hel l", "hell o"], "tokenizer.ggml.token_type": types,
                   "tokenizer.ggml.eos_token_id": len(tokens) - 3}), tokens


def test_unused_tokens_decode_to_nothing_and_text_tokenizes_as_before():
    (src, tokens), (plain, _) = source(True), source(False)
    tok = Tokenizer.from_str(tokenizer_files(src)["tokenizer.json"])
    before = Tokenizer.from_str(tokenizer_files(plain)["tokenizer.json"])
    pad0, pad1, hello = tokens.index("[PAD0]"), tokens.index("[PAD1]"), tokens.index("hello")
    assert tok.decode([pad0, hello, pad1], skip_special_tokens=True) == "hello"
    assert before.decode([pad0, hello, pad1], skip_special_tokens=True) == "[PAD0]hello[PAD1]"   # the old output
    for text in ("hello hello", "hel lo h e", "héllo\n"):
        assert tok.encode(text, add_special_tokens=False).ids == before.encode(text, add_special_tokens=False).ids
    specials = {t["content"] for t in json.loads(tokenizer_files(src)["tokenizer.json"])["added_tokens"]
                if t["special"]}
    assert specials == {"<|endoftext|>", "[PAD0]", "[PAD1]"}
