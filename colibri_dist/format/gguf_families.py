"""The GGUF architectures colibri imports, collected from the family entries (families/_gguf.py rows).

Role in the data flow: gguf_source.py looks a file's `general.architecture` up in ARCHES and reads the
row of the family that carries it; the tables of names and keys live with the families (families/_gguf.py).
"""
from .. import families
from ..families._gguf import (EXPERT_BIAS_STACKS, EXPERT_STACKS, GLOBAL_TENSORS, REQUIRED,  # noqa: F401  (re-exported)
                              ROW_VECTORS)

# llama.cpp architecture -> (the family's model_type, its GgufArch row)
ARCHES = {f.gguf.arch: (name, f.gguf) for name, f in families.FAMILIES.items() if f.gguf is not None}
