"""Dense part of a whole model in the container: which source tensors become encoded matrices.

Role in the data flow: convert.py calls write_dense after the MoE layers. Matrices the
decoder multiplies by (attention projections of every family) are encoded in the `dense`
scheme and lm_head in the `lm_head` scheme one at a time, each in chunks of rows (pack_matrix_stream) where
the scheme encodes rows independently, so peak memory is one chunk whatever the vocabulary; a tied embedding also becomes `lm_head.weight`; each non-MoE layer's SwiGLU MLP (DeepSeek's first dense layers,
Qwen's mlp_only_layers) becomes one dense-MLP blob. Norm weights, biases and the embedding
table stay plain tensors (the embedding is gathered, not streamed, per token). A GGUF import keeping each
tensor's own encoding gives `dense` / `lm_head` as {matrix name: scheme} (scheme_plan.py): every matrix, and
each part of a dense MLP, is then written in its own (a Q4_K_M file's Q6_K value projections beside Q4_K ones).
"""
import re

from .. import families
from ..errors import FormatError, InvalidArgument
from . import spec
from .quantize import holds_blocks_of, pack_expert, pack_matrix, pack_matrix_stream, rows_separable
from .scheme_plan import pick

_PROJECTIONS = "q_proj|k_proj|v_proj|o_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|k_b_proj|v_b_proj"
EMBED, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"
CHUNK_F32_BYTES = 64 << 20     # a big matrix is read and encoded this many bytes of float32 rows at a time
_MLP_PARTS = ("gate_proj", "up_proj", "down_proj")


def read_matrix(source, name, shape, scheme):
    """Matrix `name` to be encoded in `scheme`: its stored blocks when the source holds it in that encoding
    already or in blocks `scheme` lays out anew (a GGUF's Q8_0, its Q4_K as q4_k_r8: copied, never requantized),
    else float32."""
    if holds_blocks_of(scheme, source.stored_scheme(name)):
        return source.read_encoded(name, shape)
    return source.read_f32(name, shape)


def matrix_name(names=families.Names()):
    """The pattern of the encoded matrices' names: lm_head and the attention projections of every layer."""
    return re.compile(rf"^(lm_head\.weight|model\.layers\.\d+\.{re.escape(names.attn)}\.({_PROJECTIONS})\.weight)$")


def dense_mlp_names(layer, names=families.Names()):
    return tuple(f"model.layers.{layer}.{names.dense_mlp}.{part}.weight" for part in _MLP_PARTS)


def write_dense(writer, source, hf, cfg, scheme, used, pbar, lm_head=None):
    """Write the encoded matrices and dense-MLP blobs; returns the source names consumed.
    scheme: the dense part, one scheme or {matrix name: scheme} (scheme_plan.py); lm_head: the LM head's
    (None: `scheme`)."""
    head = scheme if lm_head is None else lm_head
    fam = families.get(cfg.family).names
    done = set()
    for layer in range(cfg.n_layers):
        names = dense_mlp_names(layer, fam)
        if layer in cfg.moe_layers or not all(n in source for n in names):
            continue
        schemes = tuple(pick(scheme, n) for n in names)
        mats = [read_matrix(source, n, tuple(source.ref(n).shape), s) for n, s in zip(names, schemes)]
        try:
            blob, layout = pack_expert(mats[0], mats[1], mats[2], schemes)
        except InvalidArgument as exc:
            raise FormatError(f"{source.dir}: dense MLP of layer {layer}: cannot encode as "
                              f"{'/'.join(schemes)}: {exc}") from exc
        writer.add_blob(f"model.layers.{layer}.mlp", blob, layout, spec.KIND_DENSE_MLP, layer, -1)
        pbar.update(sum(source.ref(n).nbytes for n in names))
        done.update(names)
    pattern = matrix_name(fam)
    for name in sorted(n for n in source.refs if pattern.match(n) and n not in used):
        _matrix(writer, source, name, name, pick(head if name == LM_HEAD else scheme, name))
        pbar.update(source.ref(name).nbytes)
        done.add(name)
    if hf.get("tie_word_embeddings") and LM_HEAD not in source and EMBED in source:
        _matrix(writer, source, EMBED, LM_HEAD, pick(head, EMBED))
    if EMBED in source and source.stored_scheme(EMBED):     # a block-encoded embedding stays encoded (cb_embed)
        _matrix(writer, source, EMBED, EMBED, source.stored_scheme(EMBED))
        pbar.update(source.ref(EMBED).nbytes)
        done.add(EMBED)
    return done


def _matrix(writer, source, src_name, name, scheme):
    ref = source.ref(src_name)
    if len(ref.shape) != 2:
        raise FormatError(f"{ref.file}: tensor {src_name!r} has shape {list(ref.shape)}, expected a matrix")
    rows, cols = ref.shape
    try:
        if rows_separable(scheme):      # row by row: memory bounded whatever the vocabulary (the LM head)
            chunk = max(1, CHUNK_F32_BYTES // (4 * cols))
            read = source.read_rows_encoded if holds_blocks_of(scheme, source.stored_scheme(src_name)) \
                else source.read_rows_f32
            chunks, nbytes, layout = pack_matrix_stream(lambda r0, r1: read(src_name, r0, r1), rows, cols, scheme, chunk)
            writer.add_matrix_stream(name, chunks, nbytes, layout)
        else:
            blob, layout = pack_matrix(read_matrix(source, src_name, tuple(ref.shape), scheme), scheme)
            writer.add_matrix(name, blob, layout)
    except InvalidArgument as exc:
        raise FormatError(f"{ref.file}: tensor {src_name!r}: cannot encode as {scheme}: {exc}") from exc
