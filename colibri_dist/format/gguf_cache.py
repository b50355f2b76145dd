"""LLM("MODEL.gguf"): the GGUF imported once into a cached .colibri, reused while the file is unchanged.

Role in the data flow: model/llm.py hands its `model` path here; a path that is not a GGUF file comes back
as it is. A GGUF file becomes `<$COLIBRI_CACHE_DIR or ~/.cache/colibri>/gguf/<stem>-<key>.colibri`, the key
hashing the file's absolute path, size and modification time, the container version and the importer's
revision (gguf_import.REVISION), so an edited or replaced file, or one a newer importer writes differently, is
imported again. The import is convert() (keeping the file's encodings), which writes
`<dst>.partial` and renames it only when complete: an interrupted import leaves no cache entry.
"""
import hashlib
import os
import sys

from . import gguf_import, spec
from .gguf_source import is_gguf


def cache_path(path):
    """Where the container imported from GGUF file `path` lives."""
    st = os.stat(path)
    ident = f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{spec.VERSION}\0{gguf_import.REVISION}"
    key = hashlib.sha256(ident.encode()).hexdigest()[:16]
    base = os.environ.get("COLIBRI_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "colibri")
    stem = os.path.splitext(os.path.basename(path))[0]
    return os.path.join(base, "gguf", f"{stem}-{key}.colibri")


def container_for(path, progress=True, log=None):
    """`path` itself, or for a GGUF file its cached container (imported now if it is not cached yet)."""
    path = os.fspath(path)
    if not is_gguf(path):
        return path
    dst = cache_path(path)
    if not os.path.exists(dst):
        from .convert import convert
        (log or _stderr)(f"colibri: importing {path} into {dst} (once; later runs reuse it)")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        convert(path, dst, progress=progress)
    return dst


def _stderr(message):
    print(message, file=sys.stderr, flush=True)
