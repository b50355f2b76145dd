"""TEMPORARY f32-only expert packer, used until format/quantize.py (pack_expert) lands."""
import numpy as np

from ..errors import FormatError
from .layout import PART_ALIGN, ExpertLayout, MatrixLayout


def pack_expert(gate, up, down, scheme):
    if scheme != "f32":
        raise FormatError(f"expert scheme {scheme!r} needs format/quantize.py (not available yet)")
    parts, layouts, pos = [], [], 0
    for m in (gate, up, down):
        m = np.ascontiguousarray(m, dtype=np.float32)
        layouts.append(MatrixLayout(0, m.shape[0], m.shape[1], pos, m.nbytes))
        parts.append((pos, m))
        pos = (pos + m.nbytes + PART_ALIGN - 1) // PART_ALIGN * PART_ALIGN
    blob = np.zeros(pos, dtype=np.uint8)
    for off, m in parts:
        blob[off:off + m.nbytes] = m.view(np.uint8).ravel()
    return blob, ExpertLayout(*layouts, nbytes=pos, scheme="f32")
