"""convert(src, dst, experts=None, dense=None, lm_head=None, preset=None): HF safetensors or GGUF -> .colibri.

Role in the data flow: the way models enter colibri. It reads config.json (for a `.gguf` file:
gguf_import.py gives the config.json its metadata stands for, its tokenizer files, and by default
keeps each part's own encoding),
picks the family (families.py), checks up front that every MoE tensor exists
with the right shape (so a bad checkpoint fails before a byte is written),
then streams: per MoE layer the router (f32), the correction bias, the shared
gate, the shared expert blob and each expert blob (pack_expert, one expert in
memory at a time); the dense matrices (attention projections; the tied embedding
as lm_head) encoded in the `dense` scheme, lm_head in the `lm_head` scheme, one at
a time (dense_plan.py; presets.py resolves a preset and the defaults),
dense MLP layers as blobs; every other tensor copied as it comes in bounded
chunks; the tokenizer files into the metadata. The writer makes the file appear
only when complete; an existing DST (and its hot-added experts) is replaced only
with force=True, never merged.
"""
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from ..errors import FormatError, InvalidArgument
from . import spec
from .config_values import check_config
from .families import detect, model_config
from .fused_experts import MXFP4_PARTS, fused_shapes, mxfp4_names, read_fused
from .gguf_source import is_gguf
from .hf_source import SafetensorsSource, storage_dtype
from .integrity import check_values, checked_chunks
from .presets import resolve
from .dense_plan import EMBED, LM_HEAD, read_matrix, write_dense
from .destination import check_destination
from .layout import MIXED, SILU
from .scheme_plan import pick, summary
from .progress import bar
from .tokenizer_files import tokenizer_files
from .quantize import Encoded, pack_expert
from .writer import ContainerWriter


def convert(src_dir, dst, experts=None, progress=True, dense=None, force=False, lm_head=None, preset=None):
    """src_dir: a Hugging Face checkpoint directory or a `.gguf` file (llama.cpp)."""
    src_dir, dst = os.fspath(src_dir), os.fspath(dst)
    gguf = is_gguf(src_dir)
    schemes = None if gguf else resolve(preset, experts, dense, lm_head)
    replaced = check_destination(dst, force)
    source = tok_files = None
    try:
        if gguf:
            from .gguf_import import open_gguf
            source, hf, tok_files, schemes = open_gguf(src_dir, experts, dense, lm_head, preset)
            config_path = src_dir
        else:
            config_path = os.path.join(src_dir, "config.json")
            hf = _read_config(config_path)
        try:
            family = detect(hf, config_path)
            check_config(hf, config_path)
            cfg = model_config(family, hf, schemes[0] if isinstance(schemes[0], str) else MIXED, config_path)
            family.attention(hf, cfg.n_layers, config_path)      # its checks too, before a byte is written
        except FormatError as exc:
            if gguf:                # named by the GGUF file and its metadata keys, not a config.json
                raise source.config_error(exc) from exc
            raise
        source = source or SafetensorsSource(src_dir)
        tok_files = tokenizer_files(src_dir) if tok_files is None else tok_files
        _write(dst, src_dir, source, hf, family, cfg, schemes, tok_files, replaced, progress)
    finally:
        if source is not None:
            source.close()
    replaced.discard()
    return dst


def _read_config(config_path):
    try:
        return json.load(open(config_path, encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FormatError(f"{config_path}: cannot read the model config ({exc})") from exc


def _write(dst, src_dir, source, hf, family, cfg, schemes, tok_files, replaced, progress):
    """Plan every MoE layer (shapes checked before a byte is written), then stream the container.
    schemes: the (experts, dense, lm_head) parts, each a scheme or {matrix name: scheme} (scheme_plan.py);
    the header's expert scheme is the one the expert matrices share, or MIXED."""
    experts, dense, lm_head = schemes
    plan = [plan_layer(family, cfg, source, layer) for layer in cfg.moe_layers]
    cfg = replace(cfg, scheme=summary(experts, [n for lp in plan for n in lp.matrices()]))
    with ContainerWriter(dst) as writer, \
            bar(total=source.total_bytes(), desc="convert", enabled=progress) as pbar:
        for lp in plan:
            write_layer(writer, cfg, source, lp, pbar, experts)
        used = {n for lp in plan for n in lp.sources}
        dropped = {n for n in source.refs if family.dropped(n, cfg.n_layers)}     # never written
        pbar.update(sum(source.ref(n).nbytes for n in dropped))
        used |= dropped
        written = write_dense(writer, source, hf, cfg, dense, used, pbar, lm_head=lm_head)
        used |= written
        for name in sorted(set(source.refs) - used):
            copy_dense(writer, source, name, pbar)
        head = LM_HEAD if LM_HEAD in source else EMBED
        meta = dict(_meta(hf, src_dir, family, cfg), dense_scheme=summary(dense, sorted(written - {LM_HEAD, EMBED})),
                    lm_head_scheme=summary(lm_head, [head]), tokenizer_files=tok_files)
        writer.finish(cfg.header_fields(), meta, before_rename=replaced.move_aside)


class LayerPlan:
    """Resolved source names for one MoE layer (per-expert or fused layout)."""

    def __init__(self, layer, prefix):
        self.layer, self.prefix = layer, prefix
        self.router = self.bias = self.shared = self.shared_gate = None
        self.per_expert = None     # list of (gate, up, down) names
        self.per_expert_biases = None   # list of (gate, up, down) bias names (family names.expert_biases)
        self.fused = None          # (gate_up, down) names
        self.fused_biases = None   # (gate_up_bias, down_bias) names (family names.fused "interleaved")
        self.layout = "gate_rows"  # the fused tensors' layout (format/fused_experts.py)
        self.sources = []

    def matrices(self):
        """The expert matrices' source names (routed and shared; a fused layer's two stacks)."""
        return [n for names in (self.per_expert or [self.fused]) + [self.shared or ()] for n in names]


def plan_layer(family, cfg, source, layer):
    prefixes = [family.layer_prefix(layer, p) for p in family.names.moe_prefixes]
    p = next((q for q in prefixes if family.router_name(q) in source), None)
    if p is None:
        raise FormatError(f"{source.dir}: checkpoint is missing tensor {family.router_name(prefixes[0])!r} "
                          f"(router of MoE layer {layer})")
    lp = LayerPlan(layer, p)
    lp.router = family.router_name(p)
    _check_shape(source, lp.router, (cfg.n_experts, cfg.hidden))
    lp.bias = family.bias_name(p)
    if lp.bias:
        _check_shape(source, lp.bias, (cfg.n_experts,))
    lp.shared = family.shared_names(p) if cfg.shared_inter else None
    lp.shared_gate = family.shared_gate_name(p) if cfg.shared_gate else None
    if lp.shared:
        _check_expert_shapes(source, lp.shared, cfg.shared_inter, cfg.hidden)
    if lp.shared_gate:
        _check_shape(source, lp.shared_gate, (1, cfg.hidden))
    gate_up, down = family.fused_names(p)
    mxfp4 = family.names.fused == "interleaved" and gate_up not in source and f"{gate_up}_blocks" in source
    if not mxfp4 and (family.per_expert_names(p, 0)[0] in source or gate_up not in source):
        _plan_per_expert(family, cfg, source, lp)
    else:
        _plan_fused(family, cfg, source, lp, mxfp4_names(gate_up, down) if mxfp4 else (gate_up, down))
    lp.sources = [n for n in (lp.router, lp.bias, lp.shared_gate) if n] + list(lp.shared or ()) \
        + [n for names in (lp.per_expert or [lp.fused + (lp.fused_biases or ())]) for n in names] \
        + [n for names in (lp.per_expert_biases or ()) for n in names]
    return lp


def _plan_per_expert(family, cfg, source, lp):
    lp.per_expert = [family.per_expert_names(lp.prefix, e) for e in range(cfg.n_experts)]
    for names in lp.per_expert:
        _check_expert_shapes(source, names, cfg.inter, cfg.hidden)
    if family.names.expert_biases:
        lp.per_expert_biases = [family.per_expert_bias_names(lp.prefix, e) for e in range(cfg.n_experts)]
        for names in lp.per_expert_biases:
            for name, n in zip(names, (cfg.inter, cfg.inter, cfg.hidden)):
                _check_shape(source, name, (n,))


def _plan_fused(family, cfg, source, lp, names):
    lp.fused, lp.fused_biases, lp.layout = names, family.fused_bias_names(lp.prefix), family.names.fused
    roles = ("gate_up", "down")
    if len(names) == len(MXFP4_PARTS):                 # the hub's MXFP4 blocks and scales
        lp.layout, roles = lp.layout + "_mxfp4", MXFP4_PARTS
    shapes = fused_shapes(lp.layout, cfg.n_experts, cfg.inter, cfg.hidden)
    for name, role in zip(names + (lp.fused_biases or ()), roles + ("gate_up_bias", "down_bias")):
        _check_shape(source, name, shapes[role])


def _check_shape(source, name, shape):
    ref = source.ref(name)
    if tuple(ref.shape) != tuple(shape):
        raise FormatError(f"{ref.file}: tensor {name!r} has shape {list(ref.shape)}, expected {list(shape)}")


def _check_expert_shapes(source, names, inter, hidden):
    for name, shape in zip(names, ((inter, hidden), (inter, hidden), (hidden, inter))):
        _check_shape(source, name, shape)


def write_layer(writer, cfg, source, lp, pbar, experts=None):
    """One MoE layer's router, bias, shared gate and expert blobs; experts: the part's scheme(s) (default
    the header's)."""
    experts = cfg.scheme if experts is None else experts
    L, p = lp.layer, lp.prefix
    _small(writer, source, lp.router, (cfg.n_experts, cfg.hidden), spec.KIND_ROUTER, L, pbar)
    if lp.bias:
        _small(writer, source, lp.bias, (cfg.n_experts,), spec.KIND_BIAS, L, pbar)
    if lp.shared_gate:
        _small(writer, source, lp.shared_gate, (cfg.hidden,), spec.KIND_SHARED_GATE, L, pbar, (1, cfg.hidden))
    if lp.shared:
        mats = _read_expert(source, lp.shared, cfg.shared_inter, cfg.hidden, experts)
        _blob(writer, source, f"{p}.shared_expert", mats, _picks(experts, lp.shared), spec.KIND_SHARED, L, -1)
        pbar.update(sum(source.ref(n).nbytes for n in lp.shared))
    for e, (mats, biases, src_bytes) in enumerate(read_ahead(_expert_reader(source, cfg, lp, e, experts)
                                                             for e in range(cfg.n_experts))):
        scheme = _picks(experts, lp.per_expert[e]) if lp.per_expert else experts
        _blob(writer, source, f"{p}.experts.{e}", mats, scheme, spec.KIND_EXPERT, L, e, biases, cfg.act)
        pbar.update(src_bytes)


def _picks(part, names):
    """(gate, up, down) schemes of an expert's three source matrices."""
    return tuple(pick(part, n) for n in names)


def _expert_reader(source, cfg, lp, e, experts):
    def read():
        if lp.per_expert:
            biases = lp.per_expert_biases[e] if lp.per_expert_biases else ()
            sizes = (cfg.inter, cfg.inter, cfg.hidden)
            return (_read_expert(source, lp.per_expert[e], cfg.inter, cfg.hidden, experts),
                    [source.read_f32(n, (size,)) for n, size in zip(biases, sizes)] or None,
                    sum(source.ref(n).nbytes for n in lp.per_expert[e] + tuple(biases)))
        names = lp.fused + (lp.fused_biases or ())
        scheme = experts if isinstance(experts, str) else None      # a safetensors part: one scheme
        mats, biases = read_fused(source, lp.fused, lp.fused_biases, e, cfg.inter, cfg.hidden, lp.layout, scheme)
        return mats, biases, sum(source.ref(n).nbytes for n in names) // cfg.n_experts
    return read


def read_ahead(thunks):
    """Yield thunk() results in order, running the next thunk on a helper thread meanwhile.

    Reading + widening expert e+1 overlaps packing + writing expert e (pread and
    numpy release the GIL); at most two experts are in memory at once.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="colibri-read") as pool:
        pending = None
        for thunk in thunks:
            nxt = pool.submit(thunk)
            if pending is not None:
                yield pending.result()
            pending = nxt
        if pending is not None:
            yield pending.result()


def _small(writer, source, name, shape, kind, layer, pbar, src_shape=None):
    data = check_values(source.ref(name).file, f"{name} (layer {layer})", source.read_f32(name, src_shape or shape).reshape(shape))
    writer.add_tensor(name, data, spec.DTYPE_CODES["float32"], shape, kind, layer)
    pbar.update(source.ref(name).nbytes)


def _read_expert(source, names, inter, hidden, part):
    shapes = ((inter, hidden), (inter, hidden), (hidden, inter))
    return [read_matrix(source, n, s, pick(part, n)) for n, s in zip(names, shapes)]


def _blob(writer, source, name, mats, scheme, kind, layer, expert, biases=None, act=SILU):
    try:
        blob, layout = pack(mats[0], mats[1], mats[2], scheme, biases, act)
    except InvalidArgument as exc:      # e.g. non-finite weights: the source's values
        what = scheme if isinstance(scheme, str) else "/".join(scheme)
        raise FormatError(f"{source.dir}: {name} (layer {layer}): cannot encode as {what}: {exc}") from exc
    writer.add_blob(name, blob, layout, kind, layer, expert)


def pack(gate, up, down, scheme, biases=None, act=SILU):
    mats = (m if isinstance(m, Encoded) else np.ascontiguousarray(m) for m in (gate, up, down))
    return pack_expert(*mats, scheme, biases=biases, act=act)


def copy_dense(writer, source, name, pbar):
    ref = source.ref(name)
    dtype = storage_dtype(ref)
    if len(ref.shape) > spec.MAX_NDIM:
        raise FormatError(f"{ref.file}: tensor {name!r} has {len(ref.shape)} dims; "
                          f".colibri stores at most {spec.MAX_NDIM}")
    writer.add_tensor_stream(name, checked_chunks(ref.file, name, dtype, source.chunks(ref)), dtype, ref.shape)
    pbar.update(ref.nbytes)


def _meta(hf, src_dir, family, cfg):
    dense = [i for i in range(cfg.n_layers) if i not in cfg.moe_layers]
    return {"source_config": hf, "source_dir": os.path.abspath(src_dir), "family": family.name,
            "expert_scheme": cfg.scheme, "dense_layers": dense, "converter": "colibri_dist 0.1.0"}
