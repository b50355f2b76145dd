"""Small tokenizers built locally (no downloads): byte-level BPE, sentencepiece-like Metaspace BPE,
WordPiece, WordLevel; trained on a tiny multilingual corpus so byte fallback splits characters."""
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

CORPUS = [
    "one two three four five six seven eight nine ten",
    "the quick brown fox jumps over the lazy dog",
    "héllo wörld, ça va? naïve café déjà vu",
    "日本語のテキストを少し書きます。東京は大きいです。",
    "emoji 🙂🚀🎉 and symbols ∑ ∫ √ ≤ ≥",
    "copy: abc abc | count: 1 2 3 4 5 | add: 2 + 3 = 5",
]
SPECIALS = ["<s>", "</s>", "<unk>"]


def byte_level_bpe(vocab_size=320):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer)
    return tok


def metaspace_bpe(vocab_size=300):
    """Llama-style: "▁" for spaces, byte fallback for characters outside the vocabulary."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    alphabet = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size + 256, special_tokens=SPECIALS + alphabet,
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer)
    return tok


def wordpiece(vocab_size=200):
    tok = Tokenizer(models.WordPiece(unk_token="<unk>"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(CORPUS * 3, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                                                  show_progress=False))
    return tok


def word_level():
    words = sorted({w for line in CORPUS for w in line.split()})
    vocab = {t: i for i, t in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")   # joins words with spaces
    return tok


ALL = {"byte_level_bpe": byte_level_bpe, "metaspace_bpe": metaspace_bpe, "wordpiece": wordpiece,
       "word_level": word_level}
