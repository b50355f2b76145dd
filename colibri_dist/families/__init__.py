"""The family registry: one module per Hugging Face model family, collected by model_type.

Role in the data flow: every module of this package whose name does not start with "_" is a family
file holding `FAMILY = Family(...)` (_base.py) under its own model_type as file name; FAMILIES maps
model_type -> Family in name order. Adding a family = one new file here (its entry + its tiny configs)
plus any native op it needs; format/ (convert, tiny checkpoints, config checks) and model/ (arch,
weights) read the entry, nothing else names the family.
"""
import importlib
import pkgutil

from ..errors import FormatError
from ._base import Attention, Family, Moe, Names


def _collect():
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if not isinstance(family, Family) or family.model_type != info.name:
            raise ImportError(f"{module.__file__}: a family file must define FAMILY = Family({info.name!r}, ...)")
        found[info.name] = family
    return found


FAMILIES = _collect()


def get(model_type, where="config.json", architectures=()):
    """The Family of a model_type; FormatError naming `where` and the supported ones otherwise."""
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise FormatError(f"{where}: unsupported architecture model_type={model_type!r} {list(architectures)}; "
                          f"supported: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type]


__all__ = ["Attention", "FAMILIES", "Family", "Moe", "Names", "get"]
