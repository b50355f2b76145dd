"""The GGUF tokenizer import against llama.cpp's own tokenizer test vectors (models/ggml-vocab-*.gguf with .inp
texts and .out token ids, from the llama.cpp source tree in shared/peers): the tokenizer.json rebuilt from the
file's metadata gives exactly llama.cpp's ids. Skipped when that tree is absent (the vocab files are 6-8 MB and
gguf's reader takes ~25 s on each on a loaded 2-core host, so this is marked slow); tests/format/test_format_gguf.py
covers the same path on a trained tokenizer everywhere."""
import os

import pytest

gguf = pytest.importorskip("gguf")
from tokenizers import Tokenizer  # noqa: E402

from colibri_dist.format.gguf_tokenizer import VocabFile, tokenizer_files  # noqa: E402

MODELS = os.environ.get("COLIBRI_LLAMA_CPP_MODELS",
                        "/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/models")


@pytest.mark.slow
@pytest.mark.parametrize("vocab", ["qwen2"])   # the imported architectures' pre-tokenizer; llama-bpe joins when an
                                                # architecture using it does (each vocab costs ~11-25 s of gguf parsing)
def test_token_ids_equal_llama_cpps_test_vectors(vocab):
    path = os.path.join(MODELS, f"ggml-vocab-{vocab}.gguf")
    if not os.path.exists(path + ".out"):
        pytest.skip(f"llama.cpp's vocab test files are not at {MODELS} (set COLIBRI_LLAMA_CPP_MODELS)")
    tok = Tokenizer.from_str(tokenizer_files(VocabFile(path))["tokenizer.json"])
    texts = open(path + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    want = open(path + ".out", encoding="utf-8").read().split("\n")
    assert len(texts) >= 40
    for text, ids in zip(texts, want):
        assert tok.encode(text, add_special_tokens=False).ids == [int(i) for i in ids.split()], repr(text)
