"""llama.cpp's MXFP4 blocks (OCP microscaling FP4: gpt-oss's experts): the reference quantizer and the exact
dequantizer.

Role in the data flow: format/quantize.py's quantize_matrix / dequantize for the `mxfp4` encoding
(native/src/mxfp4.h reads the same bytes). A GGUF's MXFP4 blocks are copied as they are (Encoded); the
quantizer lets colibri write the encoding from float weights (tests, convert --experts mxfp4). It is ggml's
quantize_row_mxfp4_ref as gguf.quants.MXFP4 writes it (e = floor(log2(max|x|)) - 2 + 127, each element the
nearest of the 16 E2M1 values, the first on a tie), so its blocks equal gguf.quants.quantize's. A block is
32 elements: an E8M0 exponent byte e, then 16 bytes of 4-bit codes (element j < 16 the low nibble of byte j,
j >= 16 the high nibble of byte j - 16). Element j = kv[q] * 2^(e-128), kv the E2M1 values doubled (ggml's
kvalues_mxfp4, GGML_E8M0_TO_FP32_HALF): every product exact, so the dequantizer equals gguf.quants' bit for bit.
"""
import numpy as np

from ..errors import InvalidArgument

QK = 32
BLOCK_BYTES = 17
KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
_CHUNK = 8192          # blocks per argmin pass: [chunk, 32, 16] float32 distances (16 MiB)


def _blocks(w):
    rows, cols = w.shape
    if cols % QK:
        raise InvalidArgument(f"mxfp4 needs cols a multiple of {QK} (llama.cpp's blocks), got a [{rows}, {cols}] "
                              "matrix")
    return np.asarray(w, np.float32).reshape(-1, QK)


def e8m0_half(e):
    """E8M0 bytes -> 2^(e-128) as float32 (ggml_e8m0_to_fp32_half: the subnormals 2^-128, 2^-127 for e < 2)."""
    e = np.asarray(e, np.uint32)
    return np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23)).astype(np.uint32).view(np.float32)


def _codes(x, d):
    """Nearest kv * d to each element (argmin over the 16 values: the first on a tie, as gguf's and ggml's)."""
    out = np.empty(x.shape, np.uint8)
    kv = KVALUES.astype(np.float32)
    for s in range(0, x.shape[0], _CHUNK):
        err = np.abs(d[s:s + _CHUNK, :, None] * kv - x[s:s + _CHUNK, :, None])
        out[s:s + _CHUNK] = np.argmin(err, axis=-1)
    return out


def quantize_mxfp4(w):
    """float32 [rows, cols] -> uint8 [rows, cols / 32 * 17] (block_mxfp4: e, qs[16])."""
    x = _blocks(w)
    amax = np.abs(x).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0)
    e = np.clip(e, 0, 254).astype(np.uint8)                 # E8M0 255 is NaN in the OCP spec: never written
    q = _codes(x, e8m0_half(e))
    qs = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([e, qs], axis=1).reshape(w.shape[0], -1)


def dequantize_mxfp4(raw, rows, cols):
    """uint8 MXFP4 blocks of a [rows, cols] matrix -> float32, gguf.quants' values bit for bit."""
    b = np.asarray(raw, np.uint8).reshape(-1, BLOCK_BYTES)
    qs = b[:, 1:]
    q = np.concatenate([qs & 15, qs >> 4], axis=1)
    with np.errstate(over="ignore"):                       # e = 255 times 8 or 12: inf, as ggml computes it
        return (e8m0_half(b[:, :1]) * KVALUES[q].astype(np.float32)).reshape(rows, cols)


QUANTIZE = {"mxfp4": quantize_mxfp4}
DEQUANTIZE = {"mxfp4": dequantize_mxfp4}
