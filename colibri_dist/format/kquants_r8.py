"""q4_k_r8: llama.cpp's Q4_K blocks, every byte kept, laid out 8 rows at a time (native/src/kquants_r8.h).

Role in the data flow: format/quantize.py writes a q4_k_r8 matrix from Q4_K blocks (a GGUF's, copied, or our
quantizer's) through `interleave`, and reads its values back through `deinterleave` and Q4_K's exact dequantizer (RELAYOUT:
quantize.py derives both).
The layout, per group of 8 rows and super-block column b (one 1152-byte unit): the 8 rows' f16 d, their f16 dmin,
their 12 scale bytes each, then the code bytes by 64-byte piece (run p, piece c: 16 pieces), qword q of a piece
holding row ROWS[q]'s code bytes 32p + 8c .. +7. The native kernels keep the 8 rows in vector lanes (so one
vector load holds 8 rows' codes) and compute Q4_K's own integers and float steps: the same outputs bit for bit.
"""
import numpy as np

from .kquants import grouped_blocks, row_groups

ROWS = (0, 4, 1, 5, 2, 6, 3, 7)         # the row in qword q of a piece (CB_R8_ROW)
GROUP, BLOCK = 8, 144


def interleave(blocks, rows, cols):
    """Q4_K bytes of a [rows, cols] matrix (row-major blocks) -> the q4_k_r8 bytes, uint8 [rows, cols // 256 * 144]."""
    g, nb = row_groups("q4_k_r8", "q4_k", GROUP, rows, cols)
    b = grouped_blocks(blocks, rows, cols, GROUP, BLOCK)      # [g, nb, 8, 144]
    codes = b[:, :, ROWS, 16:].reshape(g, nb, GROUP, 16, 8).transpose(0, 1, 3, 2, 4)       # [g, nb, piece, q, 8]
    unit = np.concatenate([b[:, :, :, 0:2].reshape(g, nb, 16), b[:, :, :, 2:4].reshape(g, nb, 16),
                           b[:, :, :, 4:16].reshape(g, nb, 96), codes.reshape(g, nb, 1024)], axis=2)
    return np.ascontiguousarray(unit).reshape(rows, nb * BLOCK)


def deinterleave(data, rows, cols):
    """q4_k_r8 bytes -> the Q4_K blocks, uint8 [rows, cols // 256 * 144] (row-major)."""
    g, nb = row_groups("q4_k_r8", "q4_k", GROUP, rows, cols)
    u = np.asarray(data, np.uint8).reshape(g, nb, GROUP * BLOCK)
    out = np.empty((g, nb, GROUP, BLOCK), np.uint8)
    out[:, :, :, 0:2] = u[:, :, 0:16].reshape(g, nb, GROUP, 2)
    out[:, :, :, 2:4] = u[:, :, 16:32].reshape(g, nb, GROUP, 2)
    out[:, :, :, 4:16] = u[:, :, 32:128].reshape(g, nb, GROUP, 12)
    codes = u[:, :, 128:].reshape(g, nb, 16, GROUP, 8).transpose(0, 1, 3, 2, 4).reshape(g, nb, GROUP, 128)
    out[:, :, list(ROWS), 16:] = codes
    return np.ascontiguousarray(out.transpose(0, 2, 1, 3)).reshape(rows, nb * BLOCK)


RELAYOUT = {"q4_k_r8": ("q4_k", interleave, deinterleave)}   # scheme -> (its block encoding, to, from its layout)
