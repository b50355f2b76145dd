"""Converter presets: one name for an (experts, dense, lm_head) choice of encodings.

Role in the data flow: `colibri convert --preset NAME` and convert(preset=...) resolve here before
anything is read. A preset fills in only what the caller left unset, so `--preset q4_k_m --lm-head
f16` keeps the preset's 4-bit experts and dense matrices and puts the LM head in f16. Each preset
names the llama.cpp file type it stands beside (token_bytes.py computes the bytes per decode token of
both; `colibri convert` prints them side by side):

- q4_k_m: every matrix int4 in groups of 64 (4.5 bits per weight: Q4_K's rate exactly), the LM head
  int6 in groups of 64 (6.5 bits; Q4_K_M keeps it in Q6_K, 6.56 bits: the 4-bit encoding would be the
  larger quality loss, int8 reads 23% more per token). Q4_K_M also moves the value projection and the expert down
  projection of some layers to Q6_K; on the benchmark model the two files differ by ~2% per token.
- q4_0: int4 in Q4_0's groups of 32 (5 bits with our f32 scale; Q4_0 has 4.5 with an f16 one), LM head int8:
  the same grouping, not the same bytes (q4_k_m is the smaller of the two).
- q8_0: int8 per row everywhere (8 bits plus one scale a row; Q8_0 has 8.5).
"""
from ..errors import InvalidArgument
from .layout import SCHEMES

# name: (experts, dense, lm_head, the llama.cpp file type it stands beside)
PRESETS = {
    "q4_k_m": ("int4-g64", "int4-g64", "int6-g64", "Q4_K_M"),
    "q4_0": ("int4-g32", "int4-g32", "int8", "Q4_0"),
    "q8_0": ("int8", "int8", "int8", "Q8_0"),
}


def resolve(preset=None, experts=None, dense=None, lm_head=None):
    """-> (experts, dense, lm_head) scheme names; unset ones from the preset, then the usual defaults
    (experts int8, dense = experts, lm_head = dense). Unknown names are InvalidArgument naming the option.
    A part may also be {matrix name: scheme} (a GGUF import keeping each tensor's own: scheme_plan.py)."""
    if preset is not None:
        if preset not in PRESETS:
            raise InvalidArgument(f"unknown preset {preset!r} (--preset); choose from {', '.join(PRESETS)}")
        p = PRESETS[preset]
        experts, dense, lm_head = experts or p[0], dense or p[1], lm_head or p[2]
    experts = experts or "int8"
    dense = dense or experts
    lm_head = lm_head or dense
    for what, flag, scheme in (("expert", "--experts", experts), ("dense", "--dense", dense),
                               ("lm_head", "--lm-head", lm_head)):
        if not isinstance(scheme, dict) and scheme not in SCHEMES:
            raise InvalidArgument(f"unknown {what} scheme {scheme!r} ({flag}); choose from {', '.join(SCHEMES)}")
    return experts, dense, lm_head


def gguf_type(preset):
    """The llama.cpp file type a preset stands beside (None for no preset)."""
    return PRESETS[preset][3] if preset in PRESETS else None
