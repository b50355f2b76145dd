"""What convert() needs from a GGUF file: the source, its config.json, tokenizer files and kept encodings.

Role in the data flow: convert.py calls open_gguf for a `.gguf` source instead of reading a Hugging
Face directory; everything after (family, plan, writer, checksums, tokenizer metadata) is the one
converter. By default each part keeps the file's own encoding per matrix (F32/F16/BF16 as f32/f16/bf16; Q8_0, Q4_K,
Q5_K, Q6_K, IQ4_XS, IQ4_NL, MXFP4, Q5_0 and Q5_1 blocks as the encodings of those names: gguf_source.BLOCK_TYPES;
a Q4_K matrix whose rows come in whole groups of 8 as q4_k_r8, a Q6_K one of whole 16-row groups as q6_k_r16, the
same blocks interleaved by rows, which the kernels run faster, 1.4-2x in cache: kept_scheme): every expert's
gate/up/down, every dense matrix, the embedding and the LM head is written in the type its tensor has in the file,
so a Q4_K_M file's Q4_K experts with Q6_K down projections on some layers, Q6_K value projections and Q8_0
fallbacks are all copied as they are (the
part is then "mixed": format/scheme_plan.py), MLA's split attn_k_b / attn_v_b too (as k_b_proj / v_b_proj, the
absorbed per-head matrices the model multiplies: gguf_source.py). An explicit --experts/--dense/--lm-head/--preset
re-encodes that part from the exactly decoded values instead. A type none of our encodings holds was refused by name when
the source opened (gguf_source.py), before anything is written.
"""
from ..encodings import BY_NAME
from .gguf_source import BLOCK_TYPES, GgufSource
from .gguf_tokenizer import tokenizer_files
from .presets import resolve

_FLOAT_SCHEMES = {"F32": "f32", "F16": "f16", "BF16": "bf16"}
# Bumped when an import writes other matrices from the same file, so gguf_cache.py imports cached files again
# (2: MLA's split attn_k_b / attn_v_b kept as k_b_proj / v_b_proj, no longer an f32 kv_b_proj; 3: Q4_K matrices
# as q4_k_r8; 4: Q6_K matrices as q6_k_r16).
REVISION = 4
# the row-interleaved layout a matrix the model multiplies is written in, by the encoding of its blocks
REGROUPED = {"q4_k": "q4_k_r8", "q6_k": "q6_k_r16"}


def open_gguf(path, experts=None, dense=None, lm_head=None, preset=None):
    """-> (source, hf config, tokenizer files, (experts, dense, lm_head) parts); the source must be closed.
    A part given no scheme (and no preset) is {matrix name: its kept encoding} (scheme_plan.py)."""
    source = GgufSource(path)
    try:
        hf = source.hf_config()
        files = tokenizer_files(source)
        if preset is None:
            kept = {name: kept_scheme(ref) for name, ref in source.refs.items()}
            experts, dense, lm_head = experts or kept, dense or kept, lm_head or kept
        return source, hf, files, resolve(preset, experts, dense, lm_head)
    except BaseException:
        source.close()
        raise


def kept_scheme(ref):
    """The colibri encoding that holds a GGUF tensor's values as they are (its blocks, copied): a Q4_K (Q6_K) matrix
    of whole 8- (16-) row groups as q4_k_r8 (q6_k_r16: the same blocks, rows interleaved for the kernels:
    format/kquants_r8.py, kquants_r16.py; the embedding, gathered by rows, stays q4_k / q6_k: dense_plan.py), every
    other type as the encoding of its name."""
    scheme = _FLOAT_SCHEMES.get(ref.dtype) or BLOCK_TYPES[ref.dtype]
    laid = REGROUPED.get(scheme)
    whole = laid is not None and len(ref.shape) == 2 and ref.shape[0] % BY_NAME[laid].row_group == 0
    return laid if whole else scheme
