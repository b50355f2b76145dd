"""A part's encoding in the converter: one scheme name, or {matrix name: scheme} (each matrix its own).

Role in the data flow: convert.py and dense_plan.py take the three parts (experts, dense, lm_head) from
presets.resolve or, for a GGUF file, from gguf_import.open_gguf, which keeps every tensor's own encoding
(a Q4_K_M file's Q4_K, Q6_K and Q8_0 side by side, per matrix) unless a scheme is given for the part.
`pick` is one matrix's scheme; `summary` what the header (the experts) and the metadata (dense_scheme,
lm_head_scheme) record: the one scheme the matrices share, or "mixed".
"""
from .layout import MIXED


def pick(part, name):
    """The scheme matrix `name` is written in."""
    return part if isinstance(part, str) else part[name]


def summary(part, names):
    """The one scheme of the matrices `names`, MIXED when they differ (None: a per-matrix part and no names)."""
    if isinstance(part, str):
        return part
    found = {part[n] for n in names}
    return (found.pop() if len(found) == 1 else MIXED) if found else None
