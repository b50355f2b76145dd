"""Hot-added and removed experts, persisted beside the container.

Role in the data flow: ExpertStore.add_expert packs a new expert and hands the
blob here; the source then serves it like a base expert and the engine routes
over base + added router rows minus removed ones. Layout on disk, in
`<model>.experts/` next to `<model>`:

    MANIFEST.json                 {"version": N, "layers": {"L": {"added": [...], "removed": [...]}}}
    seg-<version>-L<l>-E<e>.bin   one immutable file per added expert:
        [0, 4096)   b"CBSEG002", u32 length, u32 CRC-32 of the 4096 header bytes with this
                    field zeroed, JSON header (layout, offsets, crc32s, bias), zero padding
        [4096, ..)  the expert blob, then the float32 router row (64-byte aligned)

Every header field is checked at load (segment_header.py): a flipped bit is an
IntegrityError naming the file, a missing or mistyped field a FormatError naming
it. Segments written before the checksum (b"CBSEG001", JSON at byte 12) still
load with the field checks but no checksum; re-add such an expert to protect it.

An add writes the segment (temp, fsync, rename), then the manifest with the
version bumped (temp, fsync, rename, fsync of the directory). The manifest
rename is the commit point: a crash before it leaves the previous state (an
orphan segment file is ignored), a crash after it leaves the new state.
"""
import dataclasses
import fcntl
import json
import os
import threading

import numpy as np

from ..errors import FormatError, IntegrityError, StoreError
from ..format import integrity
from ..format.layout import SILU, Activation, ExpertLayout, MatrixLayout
from ..format.paths import hot_add_dir
from ..fsutil import atomic_write
from .segment_header import HEAD, MAGIC, pack_header, unpack_header
MANIFEST = "MANIFEST.json"


def segments_dir(model_path):
    return hot_add_dir(model_path)


def layout_to_dict(layout):
    return dataclasses.asdict(layout)


def layout_from_dict(d):
    mats = {k: MatrixLayout(**d[k]) for k in ("gate", "up", "down")}
    biases = tuple(d["biases"]) if d.get("biases") is not None else None
    act = Activation(**d["act"]) if d.get("act") is not None else SILU
    return ExpertLayout(nbytes=d["nbytes"], scheme=d.get("scheme", "f32"), biases=biases, act=act, **mats)


def _crc(buf):
    return integrity.crc32(buf)


def _write_atomic(path, chunks):
    atomic_write(path, chunks, replace=_rename)


def _rename(src, dst):
    """The commit step (a separate function so tests can simulate a crash here)."""
    os.replace(src, dst)


class Segments:
    def __init__(self, model_path):
        self.dir = segments_dir(model_path)
        self._lock = threading.RLock()
        self._entries = {}     # (layer, e) -> header dict (with "file")
        self._removed = {}     # layer -> set
        self._added = {}       # layer -> [e ascending]
        self._viewed = set()   # (layer, e) whose mapped blob passed its CRC check
        self.version = 0
        self.refresh()

    # ---- reading state
    def refresh(self):
        """(Re)load the committed manifest; files not listed there are ignored."""
        path = os.path.join(self.dir, MANIFEST)
        if not os.path.exists(path):
            return
        try:
            with open(path) as f:
                manifest = json.load(f)
            entries, added, removed = {}, {}, {}
            for lkey, rec in manifest.get("layers", {}).items():
                layer = int(lkey)
                for item in rec.get("added", []):
                    head = self._read_header(os.path.join(self.dir, item["file"]), layer)
                    head["file"] = item["file"]
                    entries[(layer, head["expert"])] = head
                    added.setdefault(layer, []).append(head["expert"])
                removed[layer] = set(rec.get("removed", []))
        except FormatError:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise FormatError(f"{path}: unreadable hot-add manifest ({type(exc).__name__}: {str(exc)[:200]})") from None
        with self._lock:
            self._entries, self._added, self._removed = entries, added, removed
            self.version = int(manifest.get("version", 0))

    def _read_header(self, path, layer):
        try:
            with open(path, "rb") as f:
                head = f.read(HEAD)
                size = os.fstat(f.fileno()).st_size
        except OSError as exc:
            raise FormatError(f"{path}: cannot read hot-added segment: {exc.strerror or exc}") from None
        meta = unpack_header(path, head, size, layer)
        meta["layout"] = layout_from_dict(meta["layout"])
        meta["path"] = path
        return meta

    def has(self, layer, e):
        return (layer, e) in self._entries

    def added(self, layer):
        return list(self._added.get(layer, []))

    def layers(self):
        """Layers with hot-added or removed experts."""
        with self._lock:
            return sorted(set(self._added) | set(self._removed))

    def removed(self, layer):
        return set(self._removed.get(layer, set()))

    def layout(self, layer, e):
        return self._entries[(layer, e)]["layout"]

    def bias(self, layer, e):
        return float(self._entries[(layer, e)]["bias"])

    def _region(self, layer, e, what):
        meta = self._entries[(layer, e)]
        return meta["path"], meta[f"{what}_offset"], meta[f"{what}_nbytes"], meta[f"{what}_crc32"]

    def _read_region(self, layer, e, what):
        path, off, n, crc = self._region(layer, e, what)
        out = np.empty(n, dtype=np.uint8)
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                got = os.preadv(fd, [memoryview(out)], off)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreError(f"{path}: reading hot-added expert {e} of layer {layer} failed: {exc}") from exc
        if got != n or _crc(out) != crc:
            raise StoreError(f"{path}: hot-added expert {e} of layer {layer} is damaged "
                             f"({'short read' if got != n else 'checksum mismatch'})")
        return out

    def read(self, layer, e):
        return self._read_region(layer, e, "blob")

    def view(self, layer, e):
        """Zero-copy view of a hot-added blob; its CRC is checked on the first view in this process."""
        path, off, n, crc = self._region(layer, e, "blob")
        arr = np.memmap(path, dtype=np.uint8, mode="r", offset=off, shape=(n,))
        if (layer, e) not in self._viewed:
            if _crc(arr) != crc:
                raise IntegrityError(f"{path}: hot-added expert {e} of layer {layer} is damaged "
                                     f"(checksum mismatch)")
            self._viewed.add((layer, e))
        return arr

    def router_row(self, layer, e):
        return self._read_region(layer, e, "router").view(np.float32)

    # ---- writing
    def add(self, layer, base_count, blob, layout, router_row, bias):
        """Persist one expert and commit it in the manifest. The new id is
        base_count + experts already added to the layer (decided under the
        cross-process lock). Returns (new_id, version)."""
        os.makedirs(self.dir, exist_ok=True)
        with self._lock, self._file_lock():
            self.refresh()
            new_id = int(base_count) + len(self._added.get(layer, []))
            version = self.version + 1
            name = f"seg-{version:06d}-L{layer}-E{new_id}.bin"
            router = np.ascontiguousarray(router_row, dtype=np.float32).view(np.uint8)
            blob_off = HEAD
            router_off = blob_off + (blob.nbytes + 63) // 64 * 64
            meta = {"layer": layer, "expert": new_id, "layout": layout_to_dict(layout), "bias": float(bias),
                    "blob_offset": blob_off, "blob_nbytes": int(blob.nbytes), "blob_crc32": _crc(blob),
                    "router_offset": router_off, "router_nbytes": int(router.nbytes),
                    "router_crc32": _crc(router)}
            head = pack_header(meta)
            pad = b"\0" * (router_off - blob_off - blob.nbytes)
            _write_atomic(os.path.join(self.dir, name), [head, blob, pad, router])
            self._commit(version, add=(layer, name))
            self.refresh()
            return new_id, version

    def remove(self, layer, e):
        os.makedirs(self.dir, exist_ok=True)
        with self._lock, self._file_lock():
            self.refresh()
            self._commit(self.version + 1, remove=(layer, e))
            self.refresh()

    def _commit(self, version, add=None, remove=None):
        layers = {}
        for (layer, e), meta in sorted(self._entries.items()):
            layers.setdefault(str(layer), {"added": [], "removed": []})["added"].append({"file": meta["file"]})
        for layer, gone in self._removed.items():
            layers.setdefault(str(layer), {"added": [], "removed": []})["removed"] = sorted(gone)
        if add is not None:
            layers.setdefault(str(add[0]), {"added": [], "removed": []})["added"].append({"file": add[1]})
        if remove is not None:
            rec = layers.setdefault(str(remove[0]), {"added": [], "removed": []})
            rec["removed"] = sorted(set(rec["removed"]) | {int(remove[1])})
        text = json.dumps({"version": version, "layers": layers}, indent=1).encode()
        _write_atomic(os.path.join(self.dir, MANIFEST), [text])

    def _file_lock(self):
        return _FileLock(os.path.join(self.dir, ".lock"))


class _FileLock:
    """flock on a lock file: several processes (pool workers) may add at once."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
