"""A GGUF file's tokenizer and chat template as the Hugging Face files a container carries.

Role in the data flow: gguf_import.py asks for tokenizer_files(source) and convert() stores them in the
metadata exactly where the files of a Hugging Face directory go (tokenizer_files.py), so chat and serve
work on an imported GGUF with no Hugging Face folder. The byte-level BPE of `tokenizer.ggml.model = gpt2`
is rebuilt with the `tokenizers` library from the file's tokens, merges and token types; the
pre-tokenizer's split pattern comes from PRE_TOKENIZERS by `tokenizer.ggml.pre` (the patterns of the
original tokenizer.json files that llama.cpp's llama-vocab.cpp names). A file without tokenizer
metadata gives no files; another tokenizer model or an unknown pre-tokenizer is a named error.
"""
import json
from typing import NamedTuple

from ..errors import FormatError


class Pre(NamedTuple):
    """What the original tokenizer.json of a `tokenizer.ggml.pre` value does around its BPE."""
    pattern: str            # the Split regex (None: GPT-2's own ByteLevel regex)
    nfc: bool               # an NFC normalizer first
    ignore_merges: bool     # a word that is a whole token is taken as it is (Llama 3)


_LETTERS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
_REST = r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
PRE_TOKENIZERS = {
    "qwen2": Pre(_LETTERS + r"\p{N}|" + _REST, nfc=True, ignore_merges=False),
    "llama-bpe": Pre(_LETTERS + r"\p{N}{1,3}|" + _REST, nfc=False, ignore_merges=True),
    "gpt-2": Pre(None, nfc=False, ignore_merges=False),
}
CONTROL, USER_DEFINED, UNUSED = 3, 4, 5   # tokenizer.ggml.token_type values (llama.cpp's llama_token_attr types)
HIDDEN = (CONTROL, UNUSED)   # special added tokens: left out of decoded text, as llama.cpp's token_to_piece does
                             # (UNUSED: the [PADn] rows convert_hf_to_gguf.py pads a vocabulary with)
_PREFIX = "tokenizer.ggml."


def tokenizer_files(source):
    """{file name: text} for the container's metadata ({} when the file has no tokenizer). Metadata the
    tokenizers library cannot build a tokenizer of (a merge of tokens not in the vocabulary, token types
    shorter than the tokens, a value of the wrong type) is a FormatError naming the file."""
    try:
        return _tokenizer_files(source)
    except FormatError:
        raise
    except Exception as exc:        # noqa: BLE001  (the tokenizers library raises plain Exception)
        raise FormatError(f"{source.path}: GGUF tokenizer metadata ({_PREFIX}*) cannot be imported "
                          f"({type(exc).__name__}: {exc})") from exc


def _tokenizer_files(source):
    model = source.field(_PREFIX + "model", None)
    if model is None:
        return {}
    if model != "gpt2":
        raise FormatError(f"{source.path}: GGUF metadata {_PREFIX}model = {model!r}: only the byte-level BPE "
                          f"'gpt2' tokenizer is imported yet")
    tok, tokens = _bpe(source), source.field(_PREFIX + "tokens")
    special = {k: _token_id(source, k, len(tokens)) for k in ("bos", "eos", "eot", "padding")}
    config = {"add_bos_token": bool(source.field(_PREFIX + "add_bos_token", False)),
              "add_eos_token": False, "clean_up_tokenization_spaces": False}
    for key, hf_key in (("bos", "bos_token"), ("eos", "eos_token"), ("padding", "pad_token")):
        if special[key] is not None:
            config[hf_key] = tokens[special[key]]
    template = source.field("tokenizer.chat_template", None)
    if template is not None:
        config["chat_template"] = template
    if config["add_bos_token"] and special["bos"] is not None:
        _add_bos(tok, tokens[special["bos"]], special["bos"])
    eos = [i for i in (special["eos"], special["eot"]) if i is not None]
    generation = {"eos_token_id": sorted(set(eos)) if len(set(eos)) > 1 else (eos[0] if eos else None)}
    if special["bos"] is not None:
        generation["bos_token_id"] = special["bos"]
    return {"tokenizer.json": tok.to_str(), "tokenizer_config.json": json.dumps(config),
            "generation_config.json": json.dumps(generation)}


def _bpe(source):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    tokens = source.field(_PREFIX + "tokens")
    merges = [tuple(m.split(" ", 1)) for m in source.field(_PREFIX + "merges")]
    types = source.field(_PREFIX + "token_type", None) or [1] * len(tokens)
    pre = source.field(_PREFIX + "pre", "gpt-2")
    if pre not in PRE_TOKENIZERS:
        raise FormatError(f"{source.path}: GGUF metadata {_PREFIX}pre = {pre!r}: pre-tokenizer not imported yet "
                          f"(supported: {', '.join(PRE_TOKENIZERS)})")
    row = PRE_TOKENIZERS[pre]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                               ignore_merges=row.ignore_merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=row.pattern is None)
    tok.pre_tokenizer = byte_level if row.pattern is None else pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(row.pattern), behavior="isolated", invert=False), byte_level])
    tok.normalizer = normalizers.NFC() if row.nfc else None
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken(tokens[i], special=types[i] in HIDDEN, normalized=False)
                    for i in range(len(tokens)) if types[i] in (*HIDDEN, USER_DEFINED)])
    return tok


def _token_id(source, key, n_tokens):
    value = source.field(f"{_PREFIX}{key}_token_id", None)
    if value is not None and not 0 <= value < n_tokens:
        raise FormatError(f"{source.path}: GGUF metadata {_PREFIX}{key}_token_id = {value} is outside the "
                          f"{n_tokens}-token vocabulary")
    return value


def _add_bos(tok, bos, bos_id):
    from tokenizers import processors
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1", special_tokens=[(bos, bos_id)])])


class VocabFile:
    """A vocab-only GGUF (llama.cpp's models/ggml-vocab-*.gguf, no tensors to import): the metadata
    tokenizer_files reads, for tests and benchmarks that want a real tokenizer."""

    def __init__(self, path):
        from .gguf_source import gguf_package
        self.path, self._reader = path, gguf_package(path).GGUFReader(path)

    def field(self, key, default=None):
        f = self._reader.get_field(key)
        return default if f is None else f.contents()
