"""Build a cached artifact directory exactly once, crash-safe: build into a temp dir beside it, mark it
DONE, rename into place. Used by both demos (demos/classifier.py, demos/llm_cache.py).

Role in the data flow: `colibri run` with `model: null` asks for the demo's directory; a half-built
leftover (killed run) has no DONE marker and is replaced; two racing builds leave one complete copy.
"""
import hashlib
import json
import os
import shutil
import tempfile

from ..config import as_dict


def settings_key(settings, format_version):
    """16 hex digits naming a build: the settings (less cache_dir), the builder's and the container's versions."""
    from ..format import spec
    d = as_dict(settings)
    d.pop("cache_dir", None)
    d["format_version"] = format_version
    d["container_version"] = spec.VERSION       # a new .colibri format rebuilds the cache
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def cache_root(prefix, settings, format_version):
    """<settings.cache_dir | $COLIBRI_CACHE_DIR | ~/.cache/colibri>/<prefix>-<settings_key>."""
    base = settings.cache_dir or os.environ.get("COLIBRI_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "colibri")
    return os.path.join(base, f"{prefix}-{settings_key(settings, format_version)}")


def build_once(root, key, build, log, message):
    """root: the cache dir; build(tmp_dir) fills a fresh dir; returns root once it holds a complete build."""
    if os.path.exists(os.path.join(root, "DONE")):
        return root
    os.makedirs(os.path.dirname(root), exist_ok=True)
    log(message)
    tmp = tempfile.mkdtemp(prefix=".building-", dir=os.path.dirname(root))
    try:
        build(tmp)
        with open(os.path.join(tmp, "DONE"), "w") as fh:
            fh.write(json.dumps({"key": key}) + "\n")
        try:
            os.rename(tmp, root)
        except OSError:
            if not os.path.exists(os.path.join(root, "DONE")):
                shutil.rmtree(root, ignore_errors=True)   # a half-built leftover: replace it
                os.rename(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root
