"""Numpy quantizers for every expert weight scheme, blob packing and a reference dequantizer.

Role in the data flow: the converter/writer calls `pack_expert(gate, up, down,
scheme)` to turn float matrices into one expert blob + `ExpertLayout`
(format/layout.py); the native kernels read that blob in place; tests use
`dequantize` as the numpy reference of what the kernels must compute.

Schemes (value of element (r, c) after decoding, exactly as native/include/colibri.h):
  f32, f16 (IEEE, round to nearest even), bf16 (round to nearest even)
  int8         q[r,c] * scale[r],               scale = max|w[r,:]| / 127
  int8-gG      q[r,c] * scale[r, c // G],       per group of G along the columns (last group may be short)
  int8-minmax  (q[r,c] - zero) * scale,         one f32 scale + one int32 zero point per matrix,
               range [min(w, 0), max(w, 0)] mapped onto [-128, 127]
  int4-gG      q[r,c] * scale[r, c // G],       q in [-7, 7], two codes a byte (pack_int4), per group the
               least-squared-error step of max|group| / d, d in 7 .. 9 (_group_scales)
  int6-g64     q[r,c] * scale[r, c // 64],      q in [-31, 31], scale = max|group| / 31, 4 codes in 3 bytes
               (pack_int6: a little-endian bit stream, code c at bits 6c .. 6c+5 of its row)
  q8_0         q[r,c] * d[r, c // 32],          llama.cpp's Q8_0 blocks (34 bytes: f16 d, 32 int8 codes), made
               as ggml's quantize_row_q8_0_ref makes them (d = max|block| / 127 to f16, q = roundf(x / d),
               half away from zero; a short last block zero-padded); a GGUF's Q8_0 blocks arrive as
               Encoded and are kept as they are
  q4_k, q6_k   llama.cpp's Q4_K / Q6_K super-blocks of 256 (144 / 210 bytes; cols must be a multiple of 256):
               format/kquants.py (a plain min/max reference quantizer, the exact gguf.quants dequantizer); a
               GGUF's blocks arrive as Encoded and are kept as they are
  mxfp4        llama.cpp's MXFP4 blocks of 32 (17 bytes: an E8M0 exponent, 16 bytes of E2M1 codes; cols a
               multiple of 32): format/mxfp4.py (ggml's reference quantizer, the exact dequantizer); a GGUF's
               blocks arrive as Encoded and are kept as they are
  iq4_xs,      llama.cpp's IQ4_XS super-blocks of 256 (136 bytes) / IQ4_NL blocks of 32 (18 bytes): 4-bit indices
  iq4_nl       into kvalues_iq4nl times a (sub-)block scale: format/iquants.py (a plain reference quantizer,
               the exact dequantizer); a GGUF's blocks arrive as Encoded and are kept as they are
  q5_0, q5_1   llama.cpp's Q5_0 / Q5_1 blocks of 32 (22 / 24 bytes: f16 d (and m), 5th bits, nibbles; llama-quantize's
               fallback for rows not in 256-blocks): format/q5quants.py (ggml's reference quantizers, the exact
               dequantizers); a GGUF's blocks arrive as Encoded and are kept as they are
Rounding to codes is round-half-to-even (np.rint) except q8_0's. Inputs must be finite.
"""
from dataclasses import dataclass

import numpy as np

from ..encodings import BY_NAME, SCALE_BLOCK, SCALE_GROUP, SCALE_ROW, SCALE_SUPER, encoding
from ..errors import InvalidArgument
from . import iquants, kquants, kquants_r8, kquants_r16, mxfp4, q5quants
from .layout import PART_ALIGN, SCHEMES, SILU, ExpertLayout, MatrixLayout, scheme_of


def _align(n, a=PART_ALIGN):
    return (n + a - 1) // a * a


def f32_to_bf16_bits(w):
    """float32 -> bf16 bit patterns (uint16), round to nearest even."""
    bits = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_bits_to_f32(h):
    return (np.asarray(h, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _symmetric_int8(w, amax):
    scale = (amax / np.float32(127.0)).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    q = np.clip(np.rint(w / safe), -127, 127).astype(np.int8)
    return q, scale


@dataclass(frozen=True)
class Encoded:
    """A matrix already in `scheme` (a GGUF's Q8_0 blocks): data uint8 [rows, row bytes], packed as it is."""
    scheme: str
    rows: int
    cols: int
    data: np.ndarray

    @property
    def shape(self):
        return (self.rows, self.cols)

# the layouts of another encoding's blocks: scheme -> (the block encoding, blocks -> layout, layout -> blocks)
_RELAYOUT = {**kquants_r8.RELAYOUT, **kquants_r16.RELAYOUT}
# the SCALE_SUPER encodings (llama.cpp's blocks kept whole), by scheme: their quantizer and exact dequantizer (the
# layouts' added below from their block encoding's)
_WHOLE_BLOCK_QUANTIZE = {**kquants.QUANTIZE, **mxfp4.QUANTIZE, **iquants.QUANTIZE, **q5quants.QUANTIZE}
_WHOLE_BLOCK_DEQUANTIZE = {**kquants.DEQUANTIZE, **mxfp4.DEQUANTIZE, **iquants.DEQUANTIZE, **q5quants.DEQUANTIZE}


def _laid_out(plain, to, back):
    """A layout's (quantizer, dequantizer): its block encoding's, then interleaved / after deinterleaving."""
    q, d = _WHOLE_BLOCK_QUANTIZE[plain], _WHOLE_BLOCK_DEQUANTIZE[plain]
    return (lambda w: to(q(w), *np.shape(w))), (lambda raw, rows, cols: d(back(raw, rows, cols), rows, cols))


for _name, _spec in _RELAYOUT.items():
    _WHOLE_BLOCK_QUANTIZE[_name], _WHOLE_BLOCK_DEQUANTIZE[_name] = _laid_out(*_spec)


def holds_blocks_of(scheme, stored):
    """True when a matrix stored as `stored` blocks is written in `scheme` by copying its bytes (the same
    encoding, or a layout of the same blocks: q4_k_r8 of q4_k, q6_k_r16 of q6_k), never requantizing."""
    return stored is not None and (stored == scheme or _RELAYOUT.get(scheme, (None,))[0] == stored)


def quantize_matrix(w, scheme):
    """w float [rows, cols] (or Encoded in `scheme`) -> (data ndarray, scales float32 | None, zero int32[1] | None)."""
    if scheme not in SCHEMES:
        raise InvalidArgument(f"unknown weight scheme {scheme!r}; expected one of {sorted(SCHEMES)}")
    if isinstance(w, Encoded):
        return _encoded_data(w, scheme), None, None
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2 or w.size == 0:
        raise InvalidArgument(f"weight matrix must be 2-D and non-empty, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise InvalidArgument("weight matrix contains NaN or Inf")
    enc = BY_NAME[scheme]
    if not enc.is_int:
        if enc.bits == 32:
            return np.ascontiguousarray(w), None, None
        if enc.name == "f16":
            if np.abs(w).max() > 65504.0:           # would become inf in float16
                raise InvalidArgument(f"weight magnitude {float(np.abs(w).max()):g} does not fit float16 (max 65504)")
            return w.astype(np.float16).view(np.uint16), None, None
        return f32_to_bf16_bits(w), None, None
    if enc.scale_kind == SCALE_ROW:
        q, scale = _symmetric_int8(w, np.abs(w).max(axis=1, keepdims=True))
        scale = scale.reshape(-1)
        return q, scale, None
    if enc.scale_kind == SCALE_GROUP:
        q, scale, zero = _quantize_groups(w, enc.group, enc.qmax, search=enc.bits == 4)
        pack = _PACK.get(enc.bits)
        return (pack(q) if pack else q), scale, zero
    if enc.scale_kind == SCALE_BLOCK:
        return quantize_q8_0(w), None, None
    if enc.scale_kind == SCALE_SUPER:
        return _WHOLE_BLOCK_QUANTIZE[scheme](w), None, None
    return _quantize_minmax(w)


def block_bytes(blob, m):
    """(encoding, bytes) of MatrixLayout m's blocks in their plain row order: a q4_k_r8 (q6_k_r16) matrix's Q4_K
    (Q6_K) blocks as a GGUF holds them (q4_k / q6_k, deinterleaved), any other matrix's data as stored."""
    raw = np.asarray(blob, np.uint8)[m.data_offset:m.data_offset + m.data_bytes]
    name = encoding(m.dtype).name
    if name in _RELAYOUT:
        plain, _, deinterleave = _RELAYOUT[name]
        return plain, deinterleave(raw, m.rows, m.cols).reshape(-1)
    return name, raw


def _encoded_data(w, scheme):
    if w.scheme != scheme and holds_blocks_of(scheme, w.scheme):       # the same blocks, laid out anew
        return _RELAYOUT[scheme][1](_encoded_data(w, w.scheme), w.rows, w.cols)
    if w.scheme != scheme:
        raise InvalidArgument(f"matrix stored as {w.scheme} cannot be written as {scheme} without requantizing")
    if BY_NAME[scheme].scale_kind == SCALE_SUPER and w.cols % BY_NAME[scheme].group:
        raise InvalidArgument(f"{scheme} matrix [{w.rows}, {w.cols}]: cols must be a multiple of "
                              f"{BY_NAME[scheme].group} (whole blocks)")
    want = BY_NAME[scheme].data_bytes(w.rows, w.cols)
    data = np.ascontiguousarray(w.data, dtype=np.uint8)
    if data.size != want:
        raise InvalidArgument(f"{w.scheme} matrix [{w.rows}, {w.cols}] has {data.size} bytes, expected {want}")
    return data.reshape(w.rows, -1)


def quantize_q8_0(w):
    """float32 [rows, cols] -> uint8 [rows, ceil(cols / 32) * 34]: ggml's reference Q8_0 (a short last block is
    quantized as if zero-padded to 32: llama.cpp's files never have one, colibri's own rows may)."""
    rows, cols = w.shape
    padded = np.zeros((rows, -(-cols // 32) * 32), dtype=np.float32)
    padded[:, :cols] = w
    blocks = padded.reshape(-1, 32)
    d = (np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    x = blocks * inv
    a = np.abs(x)
    whole = np.floor(a)
    q = (np.sign(x) * (whole + np.floor(2 * (a - whole)))).astype(np.int8)   # C roundf (half away from zero), exactly
    out = np.concatenate([d.astype(np.float16).view(np.uint8), q.view(np.uint8)], axis=1)
    return out.reshape(rows, -1)


def dequantize_q8_0(raw, rows, cols):
    """uint8 Q8_0 blocks of a [rows, cols] matrix -> float32: (float)q * (float)d, as gguf.quants computes it."""
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, 34)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 2:].view(np.int8).astype(np.float32)
    return (q * d).reshape(rows, -1)[:, :cols]


def pack_int4(q):
    """int8 codes in [-8, 7] [rows, cols] -> uint8 [rows, ceil(cols/2)], low nibble = even column."""
    rows, cols = q.shape
    nib = np.zeros((rows, cols + cols % 2), dtype=np.uint8)
    nib[:, :cols] = q.astype(np.uint8) & 0x0F
    return (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)


def unpack_int4(packed, cols):
    """uint8 [rows, ceil(cols/2)] -> int8 codes [rows, cols] (two's-complement nibbles)."""
    p = np.asarray(packed, dtype=np.uint8)
    nib = np.stack([p & 0x0F, p >> 4], axis=2).reshape(p.shape[0], -1)[:, :cols].astype(np.int8)
    return ((nib ^ 8) - 8).astype(np.int8)


def pack_int6(q):
    """int8 codes in [-32, 31] [rows, cols] -> uint8 [rows, ceil(cols * 6 / 8)]: each row a little-endian bit
    stream, code c at bits 6c .. 6c+5 (two's complement), 4 codes in 3 bytes, the bits past the last code 0."""
    rows, cols = q.shape
    quads = -(-cols // 4)
    f = np.zeros((rows, 4 * quads), dtype=np.uint32)
    f[:, :cols] = q.astype(np.uint8) & 0x3F
    f = f.reshape(rows, quads, 4)
    v = f[..., 0] | (f[..., 1] << 6) | (f[..., 2] << 12) | (f[..., 3] << 18)      # 24 bits per 4 codes
    b = np.stack([v & 0xFF, (v >> 8) & 0xFF, v >> 16], axis=2).astype(np.uint8).reshape(rows, 3 * quads)
    return np.ascontiguousarray(b[:, :(cols * 6 + 7) // 8])


def unpack_int6(packed, cols):
    """uint8 [rows, ceil(cols * 6 / 8)] -> int8 codes [rows, cols] (pack_int6's bit stream)."""
    p = np.asarray(packed, dtype=np.uint8)
    rows, quads = p.shape[0], -(-cols // 4)
    b = np.zeros((rows, 3 * quads), dtype=np.uint32)
    b[:, :p.shape[1]] = p
    b = b.reshape(rows, quads, 3)
    v = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16)
    f = np.stack([(v >> s) & 0x3F for s in (0, 6, 12, 18)], axis=2).reshape(rows, 4 * quads)[:, :cols]
    return ((f.astype(np.int16) ^ 32) - 32).astype(np.int8)


_PACK = {4: pack_int4, 6: pack_int6}              # group-scaled codes narrower than a byte, by bits
_UNPACK = {4: unpack_int4, 6: unpack_int6}


def _quantize_groups(w, g, qmax=127, search=False):
    rows, cols = w.shape
    ng = -(-cols // g)
    padded = np.zeros((rows, ng * g), dtype=np.float32)
    padded[:, :cols] = w
    blocks = padded.reshape(rows, ng, g)
    amax = np.abs(blocks).max(axis=2)                               # [rows, ng]
    scale = _group_scales(blocks, amax, qmax) if search else (amax / np.float32(qmax)).astype(np.float32)
    per_col = np.repeat(scale, g, axis=1)[:, :cols]
    safe = np.where(per_col > 0, per_col, np.float32(1.0))
    q = np.clip(np.rint(w / safe), -qmax, qmax).astype(np.int8)
    return q, scale.reshape(-1), None


# 4-bit codes: besides amax / 7, try steps that clip the largest weights a little, and keep the
# one with the least squared error per group (12% less error than amax / 7 on Gaussian weights).
_INT4_DIVISORS = tuple(np.float32(7.0 + 0.25 * i) for i in range(9))     # 7.0 .. 9.0


def _group_scales(blocks, amax, qmax):
    """f32 scale per (row, group) of 4-bit codes: the least-squared-error candidate (int8 and int6: amax / qmax)."""
    best, best_err = None, None
    for div in _INT4_DIVISORS:
        s = (amax / div).astype(np.float32)
        safe = np.where(s > 0, s, np.float32(1.0))[:, :, None]
        deq = np.clip(np.rint(blocks / safe), -qmax, qmax) * safe
        err = ((deq - blocks) ** 2).sum(axis=2)
        if best is None:
            best, best_err = s, err
        else:
            better = err < best_err                          # ties keep the smaller divisor
            best, best_err = np.where(better, s, best), np.where(better, err, best_err)
    return best.astype(np.float32)


def _quantize_minmax(w):
    lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
    scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
    zero = int(np.clip(np.rint(-128.0 - lo / float(scale)), -128, 127))
    q = np.clip(np.rint(w / scale) + zero, -128, 127).astype(np.int8)
    return q, np.array([scale], dtype=np.float32), np.array([zero], dtype=np.int32)


def dequantize(blob, m):
    """Reference decode of one matrix of a blob (MatrixLayout m) to float32 [rows, cols]."""
    blob = np.asarray(blob, dtype=np.uint8).reshape(-1)
    raw = blob[m.data_offset:m.data_offset + m.data_bytes]
    shape = (m.rows, m.cols)
    name = encoding(m.dtype).name
    if encoding(m.dtype).scale_kind == SCALE_BLOCK:
        return dequantize_q8_0(raw, m.rows, m.cols)
    if encoding(m.dtype).scale_kind == SCALE_SUPER:
        return _WHOLE_BLOCK_DEQUANTIZE[name](raw, m.rows, m.cols)
    if name == "f32":
        return raw.view(np.float32).reshape(shape).copy()
    if name == "f16":
        return raw.view(np.float16).astype(np.float32).reshape(shape)
    if name == "bf16":
        return bf16_bits_to_f32(raw.view(np.uint16)).reshape(shape)
    enc = encoding(m.dtype)
    q = _UNPACK[enc.bits](raw.reshape(m.rows, -1), m.cols) if enc.bits in _UNPACK else raw.view(np.int8).reshape(shape)
    scales = blob[m.scale_offset:m.scale_offset + 4 * m.scale_count].view(np.float32)
    if enc.scale_kind == SCALE_ROW:
        return q.astype(np.float32) * scales[:, None]
    if enc.scale_kind == SCALE_GROUP:
        g = enc.group
        per_col = np.repeat(scales.reshape(m.rows, -1), g, axis=1)[:, :m.cols]
        return (q.astype(np.float32) * per_col).astype(np.float32)
    zero = int(blob[m.zero_offset:m.zero_offset + 4].view(np.int32)[0])
    return ((q.astype(np.int32) - zero).astype(np.float32) * scales[0]).astype(np.float32)


def pack_expert(gate, up, down, scheme, biases=None, act=SILU):
    """Quantize one gated expert into a blob. gate, up: [inter, hidden]; down: [hidden, inter].
    scheme: one encoding name for the three, or a (gate, up, down) tuple of names (a GGUF's Q4_K gate/up
    with a Q6_K down, each kept as it is); biases: None or float (gate [inter], up [inter], down [hidden]),
    kept as float32; act: its Activation.

    Returns (blob uint8[nbytes], ExpertLayout): gate, up, down data, then their
    scales, then their zero points, then the biases, each part PART_ALIGN-aligned.
    """
    mats = {"gate": gate, "up": up, "down": down}
    schemes = dict(zip(mats, (scheme,) * 3 if isinstance(scheme, str) else tuple(scheme)))
    if len(schemes) != 3:
        raise InvalidArgument(f"pack_expert: scheme must be a name or (gate, up, down) names, got {scheme!r}")
    shapes = {k: np.shape(v) for k, v in mats.items()}
    inter, hidden = shapes["gate"] if len(shapes["gate"]) == 2 else (None, None)
    if (inter is None or shapes["up"] != (inter, hidden) or shapes["down"] != (hidden, inter)):
        raise InvalidArgument(f"expert shapes must be gate/up [inter, hidden] and down [hidden, inter]; got {shapes}")
    parts = {}
    for name, w in mats.items():
        try:
            parts[name] = quantize_matrix(w, schemes[name])
        except InvalidArgument as exc:
            raise InvalidArgument(f"expert matrix {name!r}: {exc}") from None
    return _assemble(parts, schemes, shapes, _biases(biases, inter, hidden), act)


def _biases(biases, inter, hidden):
    if biases is None:
        return None
    if len(biases) != 3:
        raise InvalidArgument(f"expert biases must be (gate, up, down), got {len(biases)} vectors")
    out = []
    for name, b, size in zip(("gate", "up", "down"), biases, (inter, inter, hidden)):
        b = np.ascontiguousarray(b, dtype=np.float32)
        if b.shape != (size,):
            raise InvalidArgument(f"expert {name} bias has shape {list(b.shape)}, expected [{size}]")
        if not np.isfinite(b).all():
            raise InvalidArgument(f"expert {name} bias contains NaN or Inf")
        out.append(b)
    return out


def _assemble(parts, schemes, shapes, biases=None, act=SILU):
    offset, chunks, offsets = 0, [], {}
    for kind, pick in (("data", 0), ("scale", 1), ("zero", 2)):
        for name in ("gate", "up", "down"):
            arr = parts[name][pick]
            if arr is None:
                continue
            raw = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
            offsets[(name, kind)] = (offset, raw.size, arr.size)
            chunks.append((offset, raw))
            offset = _align(offset + raw.size)
    bias_offsets = None
    if biases is not None:
        bias_offsets = []
        for b in biases:
            bias_offsets.append(offset)
            chunks.append((offset, b.view(np.uint8)))
            offset = _align(offset + b.nbytes)
        bias_offsets = tuple(bias_offsets)
    blob = np.zeros(max(offset, PART_ALIGN), dtype=np.uint8)
    for off, raw in chunks:
        blob[off:off + raw.size] = raw
    mls = {}
    for name in ("gate", "up", "down"):
        rows, cols = shapes[name]
        d_off, d_bytes, _ = offsets[(name, "data")]
        s_off, _, s_count = offsets.get((name, "scale"), (-1, 0, 0))
        z_off = offsets.get((name, "zero"), (-1, 0, 0))[0]
        mls[name] = MatrixLayout(SCHEMES[schemes[name]], rows, cols, d_off, d_bytes, s_off, s_count, z_off)
    return blob, ExpertLayout(mls["gate"], mls["up"], mls["down"], blob.size,
                              scheme_of(m.dtype for m in mls.values()), bias_offsets, act)


def expert_biases(blob, layout):
    """The (gate, up, down) float32 biases of a packed expert, or None (tests, dequantized references)."""
    if layout.biases is None:
        return None
    sizes = (layout.inter, layout.inter, layout.hidden)
    return tuple(np.frombuffer(blob, np.uint8)[o:o + 4 * n].view(np.float32).copy()
                 for o, n in zip(layout.biases, sizes))


def rows_separable(scheme):
    """True when a matrix's encoding of each row depends on that row alone (all but int8-minmax)."""
    enc = BY_NAME.get(scheme) if scheme in SCHEMES else None
    return enc is not None and (not enc.is_int or enc.scale_kind in (SCALE_ROW, SCALE_GROUP, SCALE_BLOCK,
                                                                       SCALE_SUPER))


def _part_offsets(sizes):
    """Offsets of a matrix blob's parts (data, scales, zero point; None = absent), each PART_ALIGN-aligned,
    and the blob's size (at least PART_ALIGN)."""
    offsets, offset = [], 0
    for n in sizes:
        offsets.append(-1 if n is None else offset)
        if n is not None:
            offset = _align(offset + n)
    return offsets, max(offset, PART_ALIGN)


def pack_matrix_stream(read_rows, rows, cols, scheme, chunk_rows):
    """pack_matrix's blob as (chunks, nbytes, MatrixLayout) for a row-separable scheme, quantizing
    `chunk_rows` rows at a time (read_rows(r0, r1) -> float32 [r1 - r0, cols]): the data streams out chunk
    by chunk, the scales follow; bit-identical to pack_matrix of the whole matrix."""
    if not rows_separable(scheme):
        raise InvalidArgument(f"pack_matrix_stream: {scheme!r} scales the whole matrix at once")
    group = BY_NAME[scheme].row_group
    chunk_rows = -(-chunk_rows // group) * group        # whole row groups per chunk (q4_k_r8: 8 rows, q6_k_r16: 16)
    n0 = min(rows, chunk_rows)
    first = quantize_matrix(read_rows(0, n0), scheme)
    data_bytes = rows * (first[0].nbytes // n0)
    n_scales = 0 if first[1] is None else rows * (first[1].size // n0)
    (data_off, scale_off, _), nbytes = _part_offsets([data_bytes, n_scales * 4 if n_scales else None, None])
    layout = MatrixLayout(SCHEMES[scheme], rows, cols, data_off, data_bytes, scale_off, n_scales, -1)

    def chunks():
        scales, q, at = [], first, data_bytes
        for r0 in range(0, rows, chunk_rows):
            if r0:
                q = quantize_matrix(read_rows(r0, min(rows, r0 + chunk_rows)), scheme)
            yield np.ascontiguousarray(q[0]).view(np.uint8).reshape(-1)
            if q[1] is not None:
                scales.append(q[1])
        if n_scales:
            yield bytes(scale_off - data_bytes)
            yield np.concatenate(scales).view(np.uint8)
            at = scale_off + n_scales * 4
        yield bytes(nbytes - at)
    return chunks(), nbytes, layout


def pack_matrix(w, scheme):
    """Quantize one dense matrix [rows, cols] into a blob: data, then scales, then zero point, each
    PART_ALIGN-aligned. Returns (blob uint8[nbytes], MatrixLayout)."""
    data, scales, zero = quantize_matrix(w, scheme)
    raws = [None if a is None else np.ascontiguousarray(a).view(np.uint8).reshape(-1) for a in (data, scales, zero)]
    offsets, nbytes = _part_offsets([None if r is None else r.size for r in raws])
    blob = np.zeros(nbytes, dtype=np.uint8)
    for off, raw in zip(offsets, raws):
        if raw is not None:
            blob[off:off + raw.size] = raw
    rows, cols = np.shape(w)
    layout = MatrixLayout(SCHEMES[scheme], rows, cols, offsets[0], raws[0].size, offsets[1],
                          0 if scales is None else scales.size, offsets[2])
    return blob, layout
