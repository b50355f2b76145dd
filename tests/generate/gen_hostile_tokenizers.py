"""Tokenizers that fail: a real `tokenizers` file whose normalizer panics in Rust on some texts, and a
wrapper that raises any exception on a marker text (encode or decode)."""
import base64
import json
import struct

from tokenizers import Tokenizer, models, pre_tokenizers

WORDS = ["<unk>", "</s>", "one", "two", "three", "four", "five", "the", "quick", "brown", "fox", "user:",
         "assistant:", "system:", "copy:", "abc", "a", "b", "c", "x", "ok", "more"]


def charsmap_tokenizer_json(charsmap):
    """A word-level tokenizer.json whose normalizer is `Precompiled` with these charsmap bytes."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    data = json.loads(tok.to_str())
    data["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()}
    return json.dumps(data)


# a double-array trie of 0xE2 empty units: a UTF-8 byte >= 0xE2 (any character of 3 or 4 bytes: CJK,
# emoji, U+2000 and up) indexes past its end, and spm_precompiled panics ("index out of bounds")
PANIC_AT_E2 = struct.pack("<I", 4 * 0xE2) + b"\0" * (4 * 0xE2)
PANIC_AT_LOAD = b"\x10\x00\x00\x00" + b"\xff" * 20          # the blob itself does not parse: panic at load


def panicky():
    """Encodes ASCII and 2-byte characters; a Rust panic (pyo3 PanicException) on '日', '☠', emoji..."""
    return Tokenizer.from_str(charsmap_tokenizer_json(PANIC_AT_E2))


def panic_exception_class():
    try:
        panicky().encode("☠")
    except BaseException as exc:           # noqa: B036 - the point: PanicException is a BaseException
        return type(exc)
    raise AssertionError("the panicky tokenizer did not panic")


class RaisingTokenizer:
    """Delegates to `inner`; encode(text) raises make() when `marker` is in the text, decode(ids) when
    `bad_id` is among the ids."""

    def __init__(self, inner, make, marker="boom", bad_id=None):
        self.inner, self.make, self.marker, self.bad_id = inner, make, marker, bad_id

    def encode(self, text, add_special_tokens=True):
        if self.marker is not None and self.marker in text:
            raise self.make()
        return self.inner.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids, skip_special_tokens=True):
        if self.bad_id is not None and self.bad_id in ids:
            raise self.make()
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)

    def get_vocab_size(self):
        return self.inner.get_vocab_size()

    def token_to_id(self, token):
        return self.inner.token_to_id(token)
