"""The fused expert tensors of transformers >= 5 modules, per layout, as one expert's gate/up/down (+ biases).

Role in the data flow: convert.py plans a MoE layer whose experts are stacked tensors (the family entry's
`names.fused` says which layout) and reads one expert at a time through `read_fused`; the result has the
hub layout colibri packs (gate, up: [I, H]; down: [H, I], rows = outputs):
  gate_rows     gate_up_proj [E, 2I, H] (gate rows, then up rows), down_proj [E, H, I]   (Qwen, OLMoE, ...)
  interleaved   gpt-oss: gate_up_proj [E, H, 2I] (x @ W; gate in the even columns, up in the odd ones, as
                GptOssExperts._apply_gate's gate_up[..., ::2] / [..., 1::2]), down_proj [E, I, H] (x @ W),
                gate_up_proj_bias [E, 2I] (interleaved the same way), down_proj_bias [E, H]
"""
import numpy as np


def fused_shapes(layout, n_experts, inter, hidden):
    """{tensor role: expected shape} of one MoE layer's fused tensors."""
    if layout == "interleaved":
        return {"gate_up": (n_experts, hidden, 2 * inter), "down": (n_experts, inter, hidden),
                "gate_up_bias": (n_experts, 2 * inter), "down_bias": (n_experts, hidden)}
    return {"gate_up": (n_experts, 2 * inter, hidden), "down": (n_experts, hidden, inter)}


def read_fused(source, names, biases, e, inter, hidden, layout):
    """Expert e as ([gate, up, down] float32, biases (gate, up, down) or None). names: (gate_up, down);
    biases: (gate_up_bias, down_bias) names or None."""
    if layout != "interleaved":
        gate_up = source.read_f32(names[0], (2 * inter, hidden), index=e)
        down = source.read_f32(names[1], (hidden, inter), index=e)
        return [gate_up[:inter], gate_up[inter:], down], None
    gate_up = source.read_f32(names[0], (hidden, 2 * inter), index=e)
    down = source.read_f32(names[1], (inter, hidden), index=e)
    mats = [np.ascontiguousarray(gate_up[:, 0::2].T), np.ascontiguousarray(gate_up[:, 1::2].T),
            np.ascontiguousarray(down.T)]
    b = source.read_f32(biases[0], (2 * inter,), index=e)
    return mats, (b[0::2].copy(), b[1::2].copy(), source.read_f32(biases[1], (hidden,), index=e))
