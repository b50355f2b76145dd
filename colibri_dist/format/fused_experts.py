"""The fused expert tensors of transformers >= 5 modules, per layout, as one expert's gate/up/down (+ biases).

Role in the data flow: convert.py plans a MoE layer whose experts are stacked tensors (the family entry's
`names.fused` says which layout) and reads one expert at a time through `read_fused`; the result has the
hub layout colibri packs (gate, up: [I, H]; down: [H, I], rows = outputs):
  gate_rows     gate_up_proj [E, 2I, H] (gate rows, then up rows), down_proj [E, H, I]   (Qwen, OLMoE, ...)
  interleaved   gpt-oss: gate_up_proj [E, H, 2I] (x @ W; gate in the even columns, up in the odd ones, as
                GptOssExperts._apply_gate's gate_up[..., ::2] / [..., 1::2]), down_proj [E, I, H] (x @ W),
                gate_up_proj_bias [E, 2I] (interleaved the same way), down_proj_bias [E, H]
  interleaved_mxfp4   the hub's gpt-oss checkpoints: gate_up_proj_blocks [E, 2I, H/32, 16] + _scales [E, 2I, H/32]
                and down_proj_blocks [E, H, I/32, 16] + _scales (uint8; rows are outputs, gate the even ones),
                the same biases. A 32-block is an E8M0 scale byte and 16 bytes of E2M1 codes, element 2k the low
                nibble of byte k (transformers' integrations/mxfp4.py); llama.cpp's block_mxfp4 holds the same
                byte then element j in the low nibble of byte j and j + 16 in its high nibble (mxfp4.py), so each
                block is repacked exactly (convert_hf_to_gguf.py GptOssModel.transform_nibble_layout): kept as the
                `mxfp4` encoding, or decoded to float32 for any other.
"""
import numpy as np

from ..errors import FormatError
from .mxfp4 import dequantize_mxfp4
from .quantize import Encoded

MXFP4_PARTS = ("gate_up_blocks", "gate_up_scales", "down_blocks", "down_scales")


def mxfp4_names(gate_up, down):
    """The hub's MXFP4 tensors of a layer's fused experts, in MXFP4_PARTS order."""
    return f"{gate_up}_blocks", f"{gate_up}_scales", f"{down}_blocks", f"{down}_scales"


def fused_shapes(layout, n_experts, inter, hidden):
    """{tensor role: expected shape} of one MoE layer's fused tensors."""
    biases = {"gate_up_bias": (n_experts, 2 * inter), "down_bias": (n_experts, hidden)}
    if layout == "interleaved":
        return {"gate_up": (n_experts, hidden, 2 * inter), "down": (n_experts, inter, hidden), **biases}
    if layout == "interleaved_mxfp4":
        return {"gate_up_blocks": (n_experts, 2 * inter, hidden // 32, 16),
                "gate_up_scales": (n_experts, 2 * inter, hidden // 32),
                "down_blocks": (n_experts, hidden, inter // 32, 16), "down_scales": (n_experts, hidden, inter // 32),
                **biases}
    return {"gate_up": (n_experts, 2 * inter, hidden), "down": (n_experts, hidden, inter)}


def read_fused(source, names, biases, e, inter, hidden, layout, scheme=None):
    """Expert e as ([gate, up, down], biases (gate, up, down) or None). names: (gate_up, down), or the four
    MXFP4_PARTS tensors; biases: (gate_up_bias, down_bias) names or None. The matrices are float32, or
    Encoded mxfp4 blocks when the layout holds them and `scheme` is mxfp4."""
    if layout == "interleaved_mxfp4":
        gate_up = _mxfp4_rows(source, names[0], names[1], e, 2 * inter, hidden)
        mats = [gate_up[0::2], gate_up[1::2], _mxfp4_rows(source, names[2], names[3], e, hidden, inter)]
        mats = [Encoded("mxfp4", m.shape[0], cols, np.ascontiguousarray(m)) if scheme == "mxfp4"
                else dequantize_mxfp4(m, m.shape[0], cols) for m, cols in zip(mats, (hidden, hidden, inter))]
        return mats, _biases(source, biases, e, inter, hidden)
    if layout != "interleaved":
        gate_up = source.read_f32(names[0], (2 * inter, hidden), index=e)
        down = source.read_f32(names[1], (hidden, inter), index=e)
        return [gate_up[:inter], gate_up[inter:], down], None
    gate_up = source.read_f32(names[0], (hidden, 2 * inter), index=e)
    down = source.read_f32(names[1], (inter, hidden), index=e)
    mats = [np.ascontiguousarray(gate_up[:, 0::2].T), np.ascontiguousarray(gate_up[:, 1::2].T),
            np.ascontiguousarray(down.T)]
    return mats, _biases(source, biases, e, inter, hidden)


def _biases(source, names, e, inter, hidden):
    b = source.read_f32(names[0], (2 * inter,), index=e)
    return b[0::2].copy(), b[1::2].copy(), source.read_f32(names[1], (hidden,), index=e)


def _u8(source, name, e, shape):
    """Expert e's slice of a uint8 tensor [E, *shape]."""
    ref = source.ref(name)
    if ref.dtype != "U8":
        raise FormatError(f"{ref.file}: tensor {name!r} is {ref.dtype}, expected U8 (MXFP4 blocks / scales)")
    n = int(np.prod(shape))
    return np.frombuffer(source.read_raw(ref, e * n, n), np.uint8).reshape(shape)


def _mxfp4_rows(source, blocks, scales, e, rows, cols):
    """Expert e's [rows, cols] matrix of the hub's MXFP4 tensors as llama.cpp's blocks: uint8 [rows, cols/32*17]."""
    hb = _u8(source, blocks, e, (rows, cols // 32, 16))
    q = np.empty((rows, cols // 32, 32), np.uint8)
    q[..., 0::2], q[..., 1::2] = hb & 15, hb >> 4                     # element 2k, 2k + 1 of each block
    out = np.empty((rows, cols // 32, 17), np.uint8)
    out[..., 0] = _u8(source, scales, e, (rows, cols // 32))
    out[..., 1:] = q[..., :16] | (q[..., 16:] << 4)
    return out.reshape(rows, -1)
