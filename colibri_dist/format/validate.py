"""Structural checks a reader runs at open: header, bounds, shapes, completeness.

Role in the data flow: reader.py calls these before handing out any view, so a
truncated, foreign, newer or inconsistent file fails with a FormatError naming
the file (and the layer/expert/tensor) instead of producing garbage later.
native/src/model.c performs the same checks in C.
"""
import json
import math
import re

from ..errors import FormatError
from . import spec
from ..encodings import encoding
from .layout import ACTIVATIONS, BLOB_ALIGN, DTYPE_NAMES, MIXED, MIXED_CODE, SCHEMES


def check_header(path, h, size):
    if h is None:
        raise FormatError(f"{path}: truncated: {size} bytes, smaller than the {spec.HEADER_SIZE}-byte header")
    if h["magic"] != spec.MAGIC:
        raise FormatError(f"{path}: not a .colibri file (magic {h['magic']!r}, expected {spec.MAGIC!r})")
    if h["version"] > spec.VERSION:
        raise FormatError(f"{path}: format version {h['version']} is newer than this reader "
                          f"supports ({spec.VERSION}); upgrade colibri-dist")
    if h["version"] < 1:
        raise FormatError(f"{path}: invalid format version {h['version']}")
    if h["computed_crc"] != h["header_crc"]:
        raise FormatError(f"{path}: header is damaged (checksum mismatch)")
    if h["header_size"] != spec.HEADER_SIZE or h["entry_size"] != spec.ENTRY_SIZE:
        raise FormatError(f"{path}: unexpected header/entry size {h['header_size']}/{h['entry_size']}")
    if h["flags"] != 0:
        raise FormatError(f"{path}: unknown header flags {h['flags']:#x}")
    if size < h["file_size"]:
        raise FormatError(f"{path}: truncated: {size} bytes on disk, header says {h['file_size']}")
    table_end = h["table_offset"] + h["table_count"] * spec.ENTRY_SIZE
    if not (spec.DATA_START <= h["table_offset"] <= table_end <= h["meta_offset"]
            and h["meta_offset"] + h["meta_bytes"] <= h["file_size"]):
        raise FormatError(f"{path}: table or metadata out of bounds")
    _check_config(path, h)


def _check_config(path, h):
    bad = []
    if h["hidden"] <= 0 or h["inter"] <= 0 or h["n_experts"] <= 0:
        bad.append("hidden/inter/n_experts must be positive")
    if not 1 <= h["top_k"] <= max(h["n_experts"], 1):
        bad.append(f"top_k {h['top_k']} outside 1..n_experts")
    if not 0 < h["n_layers"] <= spec.MAX_LAYERS:
        bad.append(f"n_layers {h['n_layers']} outside 1..{spec.MAX_LAYERS}")
    if h["gating_kind"] not in spec.GATING_NAMES:
        bad.append(f"unknown gating kind {h['gating_kind']}")
    if (h["scheme"], h["scheme_code"]) != (MIXED, MIXED_CODE) and DTYPE_NAMES.get(h["scheme_code"]) != h["scheme"]:
        bad.append(f"unknown expert scheme {h['scheme']!r}/{h['scheme_code']}")
    if h["n_group"] < 1 or not 1 <= h["topk_group"] <= h["n_group"] or h["n_experts"] % h["n_group"] \
            or h["norm_topk_prob"] not in (0, 1) or not math.isfinite(h["routed_scaling_factor"]):
        bad.append(f"bad gating parameters n_group={h['n_group']} topk_group={h['topk_group']} "
                   f"norm_topk_prob={h['norm_topk_prob']} routed_scaling_factor={h['routed_scaling_factor']}")
    if h["expert_act"] not in ACTIVATIONS.values() or (h["expert_act"] == ACTIVATIONS["swiglu_oai"] and not (
            math.isfinite(h["swiglu_alpha"]) and math.isfinite(h["swiglu_limit"]) and h["swiglu_limit"] > 0)):
        bad.append(f"bad expert activation expert_act={h['expert_act']} swiglu_alpha={h['swiglu_alpha']} "
                   f"swiglu_limit={h['swiglu_limit']}")
    if h["shared_gate"] not in (0, 1) or h["shared_inter"] < 0 or (h["shared_gate"] and not h["shared_inter"]):
        bad.append(f"bad shared expert fields shared_inter={h['shared_inter']} shared_gate={h['shared_gate']}")
    marked = spec.moe_mask_layers(h["moe_mask"], spec.MAX_LAYERS)
    if len(marked) != h["n_moe_layers"] or (marked and marked[-1] >= h["n_layers"]):
        bad.append(f"MoE layer mask ({len(marked)} layers) disagrees with n_moe_layers={h['n_moe_layers']} "
                   f"or n_layers={h['n_layers']}")
    if bad:
        raise FormatError(f"{path}: invalid model config: " + "; ".join(bad))


def parse_meta(path, raw):
    """The metadata block -> dict; any decoding problem is a FormatError naming the file."""
    if not raw:
        return {}
    try:
        meta = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: metadata is not UTF-8 (byte {exc.start})") from None
    except RecursionError:
        raise FormatError(f"{path}: metadata JSON is nested too deeply") from None
    except ValueError as exc:
        raise FormatError(f"{path}: metadata is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise FormatError(f"{path}: metadata must be a JSON object, got {type(meta).__name__}")
    return meta


def check_unique(path, entries):
    """No two entries share a name, nor (kind, layer, expert) for MoE parts: readers must agree."""
    names, slots = {}, {}
    for i, e in enumerate(entries):
        if e.name in names:
            raise FormatError(f"{path}: duplicate tensor name {e.name!r} (table entries {names[e.name]} and {i})")
        names[e.name] = i
        if e.kind not in spec.NAMED_KINDS:
            key = (e.kind, e.layer, e.expert)
            if key in slots:
                raise FormatError(f"{path}: {describe(e)} appears twice in the tensor table "
                                  f"(entries {slots[key]} and {i})")
            slots[key] = i


def check_entries(path, cfg, entries, by_slot, data_end):
    for e in entries:
        _check_entry(path, cfg, e, data_end)
    for layer in cfg.moe_layers:
        _require(path, by_slot, spec.KIND_ROUTER, layer, -1, "router")
        for x in range(cfg.n_experts):
            _require(path, by_slot, spec.KIND_EXPERT, layer, x, f"expert {x}")
            _same_layout(path, by_slot[(spec.KIND_EXPERT, layer, 0)], by_slot[(spec.KIND_EXPERT, layer, x)])
        if cfg.shared_inter:
            _require(path, by_slot, spec.KIND_SHARED, layer, -1, "shared expert")
        if cfg.shared_gate:
            _require(path, by_slot, spec.KIND_SHARED_GATE, layer, -1, "shared expert gate")


def _same_layout(path, first, e):
    """Every expert of a layer has expert 0's layout (encodings, offsets, size): the store reads and hot-adds a
    layer's experts with one layout; encodings may differ from layer to layer (a Q4_K_M file's Q6_K downs)."""
    if e.matrices != first.matrices or e.nbytes != first.nbytes:
        parts = "/".join(DTYPE_NAMES.get(m.dtype, str(m.dtype)) for m in e.matrices)
        raise FormatError(f"{path}: {describe(e)} ({parts}, {e.nbytes} bytes) is laid out unlike expert 0 of its "
                          f"layer ({'/'.join(DTYPE_NAMES.get(m.dtype, str(m.dtype)) for m in first.matrices)}, "
                          f"{first.nbytes} bytes): a layer's experts share one layout")


_LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.")
# header field <- source_config key(s) (the first present wins): what the metadata says the model is
_META_AGREES = (("n_layers", ("num_hidden_layers",)), ("hidden", ("hidden_size",)))


def check_agreement(path, cfg, meta, entries):
    """The header, the metadata's source_config and the tensor table describe the same model:
    a tensor named for a layer past n_layers, or a source_config disagreeing with the header,
    is a FormatError naming both sides (the native parser checks the names the same way)."""
    for e in entries:
        m = _LAYER_NAME.match(e.name)
        if m and int(m.group(1)) >= cfg.n_layers:
            raise FormatError(f"{path}: the header says {cfg.n_layers} layers, but the tensor table holds "
                              f"{e.name!r} (layer {m.group(1)})")
    hf = meta.get("source_config")
    if not isinstance(hf, dict):
        return
    for field, keys in _META_AGREES:
        key = next((k for k in keys if hf.get(k) is not None), None)
        value = None if key is None else hf[key]
        if key is not None and (isinstance(value, bool) or not isinstance(value, int) or value != getattr(cfg, field)):
            raise FormatError(f"{path}: metadata source_config.{key} is {hf[key]!r}, but the header and tensor "
                              f"table hold {field}={getattr(cfg, field)}")


def _require(path, by_slot, kind, layer, expert, what):
    if (kind, layer, expert) not in by_slot:
        raise FormatError(f"{path}: layer {layer}: {what} missing from the tensor table")


def _check_entry(path, cfg, e, data_end):
    where = f"{path}: {describe(e)}"
    if e.dtype not in spec.DTYPES or e.kind not in spec.KIND_NAMES:
        raise FormatError(f"{where}: unknown dtype {e.dtype} or kind {e.kind}")
    if e.offset < spec.DATA_START or e.offset + e.nbytes > data_end or e.offset % spec.TENSOR_ALIGN:
        raise FormatError(f"{where}: data [{e.offset}, +{e.nbytes}) out of bounds or misaligned")
    if e.kind in spec.MOE_KINDS and (e.layer not in cfg.moe_layers):
        raise FormatError(f"{where}: layer {e.layer} is not a MoE layer")
    if (e.kind != spec.KIND_EXPERT and e.expert != -1) or (e.kind in spec.NAMED_KINDS and e.layer != -1):
        raise FormatError(f"{where}: layer/expert fields {e.layer}/{e.expert} must be -1 for this kind")
    if e.kind == spec.KIND_DENSE_MLP and (e.layer in cfg.moe_layers or not 0 <= e.layer < cfg.n_layers):
        raise FormatError(f"{where}: dense MLP of layer {e.layer}, which is a MoE layer or outside the model")
    if e.kind in (spec.KIND_MATRIX, spec.KIND_DENSE_MLP):
        _check_dense_blob(where, e)
        return
    if e.kind in spec.BLOB_KINDS:
        _check_blob(where, cfg, e)
        return
    count = 1
    for s in e.shape:
        count *= s
    if min(e.shape, default=1) < 0 or count * spec.DTYPE_SIZES[e.dtype] != e.nbytes:
        raise FormatError(f"{where}: shape {e.shape} x {spec.DTYPES[e.dtype]} does not match {e.nbytes} bytes")
    want = {spec.KIND_ROUTER: (cfg.n_experts, cfg.hidden), spec.KIND_BIAS: (cfg.n_experts,),
            spec.KIND_SHARED_GATE: (cfg.hidden,)}.get(e.kind)
    if want is not None and (e.shape != want or e.dtype != 0):
        raise FormatError(f"{where}: expected float32 {want}, found {spec.DTYPES[e.dtype]} {e.shape}")


def _check_blob(where, cfg, e):
    """An expert or shared-expert blob: the expected shapes, and each matrix in the header's scheme (a MIXED
    header: each in the encoding its own descriptor names)."""
    if e.offset % BLOB_ALIGN:
        raise FormatError(f"{where}: blob not {BLOB_ALIGN}-aligned")
    if e.kind == spec.KIND_EXPERT and not 0 <= e.expert < cfg.n_experts:
        raise FormatError(f"{where}: expert index outside 0..{cfg.n_experts - 1}")
    inter = cfg.inter if e.kind == spec.KIND_EXPERT else cfg.shared_inter
    shapes = ((inter, cfg.hidden), (inter, cfg.hidden), (cfg.hidden, inter))
    for part, m, (rows, cols) in zip(("gate", "up", "down"), e.matrices, shapes):
        if (m.rows, m.cols) != (rows, cols) or (cfg.scheme != MIXED and m.dtype != SCHEMES[cfg.scheme]):
            raise FormatError(f"{where}: {part} is {DTYPE_NAMES.get(m.dtype, m.dtype)} [{m.rows},{m.cols}], "
                              f"expected {'' if cfg.scheme == MIXED else cfg.scheme + ' '}[{rows},{cols}]")
        _check_part(where, e, part, m, rows, cols)
    _check_biases(where, e, (inter, inter, cfg.hidden))


def _check_biases(where, e, sizes):
    """An expert blob's float32 biases (none: every offset 0): each inside the blob, 4-aligned, past offset 0."""
    if e.biases is None:
        return
    for part, off, n in zip(("gate", "up", "down"), e.biases, sizes):
        if not (0 < off and off % 4 == 0 and off + 4 * n <= e.nbytes):
            raise FormatError(f"{where}: {part} bias [{off}, +{4 * n}) misaligned or outside the {e.nbytes}-byte blob")


_ZERO_MATRIX = spec.unpack_matrix(bytes(spec.MATRIX_STRUCT.size))


def _check_dense_blob(where, e):
    """A matrix (one layout, `gate` slot) or dense MLP (gate/up/down) blob: each part inside, sizes consistent."""
    if e.offset % BLOB_ALIGN:
        raise FormatError(f"{where}: blob not {BLOB_ALIGN}-aligned")
    if e.dtype != spec.DTYPE_CODES["uint8"] or e.shape != (e.nbytes,):
        raise FormatError(f"{where}: a blob entry is uint8 [nbytes], found {spec.DTYPES[e.dtype]} {list(e.shape)}")
    parts = (("matrix", e.matrices[0]),) if e.kind == spec.KIND_MATRIX else zip(("gate", "up", "down"), e.matrices)
    if e.kind == spec.KIND_MATRIX and any(m != _ZERO_MATRIX for m in e.matrices[1:]):
        raise FormatError(f"{where}: a matrix entry's up/down descriptors must be zero")
    for part, m in parts:
        _check_part(where, e, part, m, m.rows, m.cols)
    if e.kind == spec.KIND_MATRIX and e.biases is not None:
        raise FormatError(f"{where}: a matrix entry has no biases (bias offsets must be 0)")
    if e.kind == spec.KIND_DENSE_MLP:
        _check_biases(where, e, (e.matrices[0].rows, e.matrices[0].rows, e.matrices[0].cols))
        g, u, d = e.matrices
        if (u.rows, u.cols) != (g.rows, g.cols) or (d.rows, d.cols) != (g.cols, g.rows):
            raise FormatError(f"{where}: dense MLP parts disagree: gate {g.rows}x{g.cols}, up {u.rows}x{u.cols}, "
                              f"down {d.rows}x{d.cols}")


def _check_part(where, e, part, m, rows, cols):
    if m.dtype not in DTYPE_NAMES or m.rows <= 0 or m.cols <= 0:
        raise FormatError(f"{where}: {part} has unknown encoding {m.dtype} or empty shape [{m.rows},{m.cols}]")
    for off, size in ((m.data_offset, m.data_bytes), (m.scale_offset, 4 * m.scale_count), (m.zero_offset, 4)):
        if off != -1 and not (0 <= off and off + size <= e.nbytes and off % 4 == 0):
            raise FormatError(f"{where}: {part} part [{off}, +{size}) misaligned or outside the "
                              f"{e.nbytes}-byte blob")
    enc = encoding(m.dtype)
    if m.data_offset < 0 or m.data_bytes != enc.data_bytes(rows, cols) \
            or m.scale_count != expected_scales(m) or enc.has_scale_array != (m.scale_offset >= 0) \
            or enc.zero_point != (m.zero_offset >= 0):
        raise FormatError(f"{where}: {part} data/scale sizes inconsistent with {DTYPE_NAMES[m.dtype]} [{rows},{cols}]")


def expected_scales(m):
    """Scale count a matrix of this cb_dtype must carry (the C encoding table)."""
    return encoding(m.dtype).scale_count(m.rows, m.cols)


def describe(e):
    if e.kind == spec.KIND_EXPERT:
        return f"layer {e.layer} expert {e.expert}"
    if e.kind in spec.NAMED_KINDS:
        return f"tensor {e.name}"
    return f"layer {e.layer} {spec.KIND_NAMES.get(e.kind, f'kind {e.kind}')} ({e.name})"
