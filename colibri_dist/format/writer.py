"""Streaming .colibri writer: tensors go to disk as they arrive, never all in memory.

Role in the data flow: convert.py feeds it one tensor or expert blob at a time;
it appends each (aligned), records a table entry with its CRC32, then writes the
table, the metadata JSON and finally the header at offset 0. Every FLUSH_BYTES it
writes back what it wrote and drops it from the page cache, so converting a model
of any size holds a bounded amount of memory (convert runs inside a 2 GiB cgroup). It writes
`<dst>.partial`, fsyncs, and renames to `<dst>` only when everything is on disk;
any error (including ENOSPC) removes the partial file, so a file at `<dst>`
always opens as complete.
"""
import errno
import json
import math
import os

import numpy as np

from ..errors import FormatError
from ..fsutil import fsync_dir
from . import spec
from .layout import BLOB_ALIGN
from .validate import describe

_ZEROS = bytes(BLOB_ALIGN)


def _write_all(fd, data):
    """os.write until done (tests patch this to simulate a full disk)."""
    view = memoryview(data).cast("B")
    while len(view):
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[n:]


def _fsync(fd):
    os.fsync(fd)


FLUSH_BYTES = 64 << 20      # written bytes between write-backs: what convert keeps dirty in the page cache


def _flush(fd, start, end):
    """Writes [start, end) back and drops it from the page cache: a converter's dirty pages stay bounded
    (a memory cgroup charges them and, under cgroup v1, OOM-kills a writer that outruns write-back)."""
    os.fdatasync(fd)
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)


class ContainerWriter:
    """Use as a context manager: `with ContainerWriter(dst) as w: w.add_...; w.finish(cfg, meta)`."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.partial = self.path + ".partial"
        self.entries = []
        self.names = set()
        self.slots = set()       # (kind, layer, expert) of MoE parts: one entry each
        self._fd = None
        self._pos = 0
        self._flushed = 0        # bytes before this offset are on disk and out of the page cache
        self._done = False
        try:
            self._fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self._emit(bytes(spec.DATA_START))   # header placeholder: zero magic never opens
        except OSError as exc:
            self.abort()
            raise FormatError(f"{self.path}: cannot write: {exc}") from exc

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._done:
            self.abort()
        return False

    # -- appending ------------------------------------------------------------
    def _emit(self, data):
        try:
            _write_all(self._fd, data)
            if self._pos + len(data) - self._flushed >= FLUSH_BYTES:
                _flush(self._fd, self._flushed, self._pos + len(data))
                self._flushed = self._pos + len(data)
        except OSError as exc:
            self.abort()
            raise FormatError(f"{self.path}: write failed ({exc.strerror or exc}); "
                              f"no file was left behind") from exc
        self._pos += len(data)

    def _pad_to(self, alignment):
        gap = spec.align_up(self._pos, alignment) - self._pos
        if gap:
            self._emit(_ZEROS[:gap])

    def _append(self, entry, chunks, alignment):
        if entry.name in self.names:
            raise FormatError(f"{self.path}: duplicate tensor name {entry.name!r}")
        slot = (entry.kind, entry.layer, entry.expert)
        if entry.kind not in spec.NAMED_KINDS and slot in self.slots:
            raise FormatError(f"{self.path}: {describe(entry)} written twice ({entry.name!r})")
        try:
            entry.pack()        # validates name length and ndim before any byte is written
        except ValueError as exc:
            raise FormatError(f"{self.path}: {exc}") from exc
        self._pad_to(alignment)
        start, crc = self._pos, 0
        for chunk in chunks:
            buf = _bytes_view(chunk)
            crc = spec.crc32(buf, crc)
            self._emit(buf)
        entry.offset, entry.nbytes, entry.crc32 = start, self._pos - start, crc
        self.entries.append(entry)
        self.names.add(entry.name)
        self.slots.add(slot)
        return entry

    def add_tensor(self, name, data, dtype, shape, kind=spec.KIND_TENSOR, layer=-1, expert=-1):
        """data: ndarray or raw little-endian bytes of `dtype` (a spec.DTYPES code) and `shape`."""
        return self.add_tensor_stream(name, [data], dtype, shape, kind, layer, expert)

    def add_tensor_stream(self, name, chunks, dtype, shape, kind=spec.KIND_TENSOR, layer=-1, expert=-1):
        """Like add_tensor, with the data given as an iterable of byte chunks (bounded memory)."""
        entry = spec.Entry(name, kind, dtype, layer, expert, tuple(int(s) for s in shape), 0, 0, 0)
        entry = self._append(entry, chunks, spec.TENSOR_ALIGN)
        expected = math.prod(entry.shape) * spec.DTYPE_SIZES[dtype]     # Python ints: no overflow
        if entry.nbytes != expected:
            raise FormatError(f"{self.path}: tensor {name!r}: {entry.nbytes} bytes for shape "
                              f"{list(entry.shape)} {spec.DTYPES[dtype]} (expected {expected})")
        return entry

    def add_blob(self, name, blob, layout, kind, layer, expert):
        """An expert (or shared expert) blob from pack_expert, 4096-aligned, stored as is."""
        if len(blob) != layout.nbytes:
            raise FormatError(f"{self.path}: blob {name!r} is {len(blob)} bytes, layout says {layout.nbytes}")
        entry = spec.Entry(name, kind, spec.DTYPE_CODES["uint8"], layer, expert, (layout.nbytes,),
                           0, 0, 0, (layout.gate, layout.up, layout.down), layout.biases)
        return self._append(entry, [blob], BLOB_ALIGN)

    def add_matrix(self, name, blob, layout):
        """A dense matrix blob from pack_matrix (attention projection, lm_head), 4096-aligned."""
        if len(blob) < layout.data_offset + layout.data_bytes:
            raise FormatError(f"{self.path}: matrix {name!r}: blob of {len(blob)} bytes is shorter than its data")
        entry = spec.Entry(name, spec.KIND_MATRIX, spec.DTYPE_CODES["uint8"], -1, -1, (len(blob),),
                           0, 0, 0, (layout, None, None))
        return self._append(entry, [blob], BLOB_ALIGN)

    def add_matrix_stream(self, name, chunks, nbytes, layout):
        """add_matrix with the blob given as chunks (pack_matrix_stream): a big matrix never whole in memory."""
        entry = spec.Entry(name, spec.KIND_MATRIX, spec.DTYPE_CODES["uint8"], -1, -1, (int(nbytes),),
                           0, 0, 0, (layout, None, None))
        entry = self._append(entry, chunks, BLOB_ALIGN)
        if entry.nbytes != nbytes:
            raise FormatError(f"{self.path}: matrix {name!r}: {entry.nbytes} bytes written, {nbytes} announced")
        return entry

    # -- closing --------------------------------------------------------------
    def finish(self, config, meta, before_rename=None):
        """config: header fields (family, scheme, hidden, ... moe_mask); meta: JSON-able dict.
        before_rename: called after the last byte is synced, just before the file appears."""
        self._pad_to(spec.TENSOR_ALIGN)
        table = b"".join(e.pack() for e in self.entries)
        table_offset = self._pos
        self._emit(table)
        meta_raw = json.dumps(meta, sort_keys=True, default=str).encode("utf-8")
        meta_offset = self._pos
        self._emit(meta_raw)
        header = spec.pack_header(dict(
            config, table_offset=table_offset, table_count=len(self.entries),
            meta_offset=meta_offset, meta_bytes=len(meta_raw), file_size=self._pos,
            table_crc=spec.crc32(table), meta_crc=spec.crc32(meta_raw)))
        try:
            os.pwrite(self._fd, header, 0)
            _fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            if before_rename is not None:
                before_rename()
            os.rename(self.partial, self.path)
        except OSError as exc:
            self.abort()
            raise FormatError(f"{self.path}: could not complete the file ({exc.strerror or exc}); "
                              f"no file was left behind") from exc
        self._done = True
        fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        return self.path

    def abort(self):
        """Close and delete the partial file (idempotent)."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
        try:
            os.unlink(self.partial)
        except FileNotFoundError:
            pass


def _bytes_view(data):
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data)
    return memoryview(data).cast("B")
