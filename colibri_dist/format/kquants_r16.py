"""q6_k_r16: llama.cpp's Q6_K blocks, every byte kept, laid out 16 rows at a time (native/src/kquants_r16.h).

Role in the data flow: format/quantize.py writes a q6_k_r16 matrix from Q6_K blocks (a GGUF's, copied, or our
quantizer's) through `interleave`, and reads its values back through `deinterleave` and Q6_K's exact dequantizer (RELAYOUT:
quantize.py derives both).
The layout, per group of 16 rows and super-block column b (one 3360-byte unit): the 16 rows' f16 d, their 16 scale
bytes by sub-block (scale j of the 16 rows together), then 48 pieces of 64 bytes, 4 bytes per row: for half h and
i (0..7) the rows' ql bytes 64h + 4i .. +3, ql bytes 64h + 32 + 4i .. +3 and qh bytes 128 + 32h + 4i .. +3. The
native kernels keep the 16 rows in vector lanes and take one integer per super-block (q4_k's order, not ggml's
8 float lanes): the values are Q6_K's, the products differ from q6_k's in the last bits (native/src/kernels_kq.c).
"""
import numpy as np

from .kquants import grouped_blocks, row_groups

GROUP, BLOCK = 16, 210


def interleave(blocks, rows, cols):
    """Q6_K bytes of a [rows, cols] matrix (row-major blocks) -> the q6_k_r16 bytes, uint8 [rows, cols // 256 * 210]."""
    g, nb = row_groups("q6_k_r16", "q6_k", GROUP, rows, cols)
    b = grouped_blocks(blocks, rows, cols, GROUP, BLOCK)     # [g, nb, row, 210]
    ql = b[..., 0:128].reshape(g, nb, GROUP, 2, 2, 8, 4).transpose(0, 1, 3, 5, 4, 2, 6)    # [g, nb, h, i, k, row, 4]
    qh = b[..., 128:192].reshape(g, nb, GROUP, 2, 8, 4).transpose(0, 1, 3, 4, 2, 5)[:, :, :, :, None]
    codes = np.concatenate([ql, qh], axis=4).reshape(g, nb, 3072)
    scales = b[..., 192:208].transpose(0, 1, 3, 2).reshape(g, nb, 256)                      # [g, nb, j, row]
    unit = np.concatenate([b[..., 208:210].reshape(g, nb, 32), scales, codes], axis=2)
    return np.ascontiguousarray(unit).reshape(rows, nb * BLOCK)


def deinterleave(data, rows, cols):
    """q6_k_r16 bytes -> the Q6_K blocks, uint8 [rows, cols // 256 * 210] (row-major)."""
    g, nb = row_groups("q6_k_r16", "q6_k", GROUP, rows, cols)
    u = np.asarray(data, np.uint8).reshape(g, nb, GROUP * BLOCK)
    out = np.empty((g, nb, GROUP, BLOCK), np.uint8)
    out[..., 208:210] = u[:, :, 0:32].reshape(g, nb, GROUP, 2)
    out[..., 192:208] = u[:, :, 32:288].reshape(g, nb, 16, GROUP).transpose(0, 1, 3, 2)
    codes = u[:, :, 288:].reshape(g, nb, 2, 8, 3, GROUP, 4)                                  # [g, nb, h, i, k, row, 4]
    out[..., 0:128] = codes[:, :, :, :, 0:2].transpose(0, 1, 5, 2, 4, 3, 6).reshape(g, nb, GROUP, 128)
    out[..., 128:192] = codes[:, :, :, :, 2].transpose(0, 1, 4, 2, 3, 5).reshape(g, nb, GROUP, 64)
    return np.ascontiguousarray(out.transpose(0, 2, 1, 3)).reshape(rows, nb * BLOCK)


RELAYOUT = {"q6_k_r16": ("q6_k", interleave, deinterleave)}   # scheme -> (its block encoding, to, from its layout)
