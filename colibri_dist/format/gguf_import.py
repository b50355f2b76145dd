"""What convert() needs from a GGUF file: the source, its config.json, tokenizer files and kept encodings.

Role in the data flow: convert.py calls open_gguf for a `.gguf` source instead of reading a Hugging
Face directory; everything after (family, plan, writer, checksums, tokenizer metadata) is the one
converter. By default each part keeps the file's own encoding (F32/F16/BF16 as f32/f16/bf16; Q8_0, Q4_K,
Q5_K, Q6_K, IQ4_XS, IQ4_NL and MXFP4 blocks as the encodings of those names: gguf_source.BLOCK_TYPES):
experts, dense matrices and the LM head each take the type their tensors have in the file, and a part whose
tensors disagree is a named error until a scheme is given for it. An explicit --experts/--dense/--lm-head/
--preset re-encodes from the exactly decoded values instead.
"""
from ..errors import FormatError
from .dense_plan import EMBED, LM_HEAD, matrix_name
from .gguf_source import BLOCK_TYPES, GgufSource
from .gguf_tokenizer import tokenizer_files
from .presets import resolve

_FLOAT_SCHEMES = {"F32": "f32", "F16": "f16", "BF16": "bf16"}


def open_gguf(path, experts=None, dense=None, lm_head=None, preset=None):
    """-> (source, hf config, tokenizer files, (experts, dense, lm_head) schemes); the source must be closed."""
    source = GgufSource(path)
    try:
        hf = source.hf_config()
        files = tokenizer_files(source)
        if preset is None:
            experts = experts or _kept(source, _is_expert, "experts", "--experts")
            dense = dense or _kept(source, _is_dense, "dense matrices", "--dense")
            lm_head = lm_head or _kept(source, lambda n: n == (LM_HEAD if LM_HEAD in source else EMBED),
                                       "the LM head", "--lm-head")
        return source, hf, files, resolve(preset, experts, dense, lm_head)
    except BaseException:
        source.close()
        raise


def kept_scheme(ref):
    """The colibri encoding that holds a GGUF tensor's values as they are."""
    return _FLOAT_SCHEMES.get(ref.dtype) or BLOCK_TYPES[ref.dtype]


def _is_expert(name):
    return ".mlp.experts." in name


def _is_dense(name):
    return name != LM_HEAD and matrix_name().match(name) is not None


def _kept(source, wanted, what, flag):
    """The one encoding the file's `wanted` tensors share; None when there are none."""
    found = {}
    for name in sorted(n for n in source.refs if wanted(n)):
        found.setdefault(kept_scheme(source.ref(name)), source.ref(name).tensor)
    if len(found) > 1:
        pairs = ", ".join(f"{t} is {s}" for s, t in found.items())
        raise FormatError(f"{source.path}: the {what} are stored in different types ({pairs}); "
                          f"choose one encoding for them with {flag}")
    return next(iter(found), None)
