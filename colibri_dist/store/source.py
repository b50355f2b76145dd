"""Where experts come from when they are not in RAM or on the spill tier.

Role in the data flow: the bottom tier of ExpertStore. `ModelSource` reads
base experts from the .colibri container (one pread, checksum verified by the
reader) and hot-added experts from their segment files. `SlowSource` and
`FlakySource` wrap any source to model a network share or a remote node: the
offload stress harness and the tests use them to make reads slow or failing.

A source has:
    read(layer, e) -> uint8 blob (verified; any failure raises)
    read_into(layer, e, take) -> (blob, buffer) [optional]: the same, read
        straight into buffer = take(nbytes) (recycled RAM, no extra copy), around
        the page cache (O_DIRECT): the RAM cache is the one copy of a loaded expert
    view(layer, e) -> uint8 zero-copy view (mmap) for the no-cache mode
    layout(layer, e) -> ExpertLayout
    nbytes(layer, e) -> int
"""
import errno
import os
import threading
import time
import zlib

import numpy as np

from ..errors import ColibriError, FormatError


class ModelSource:
    def __init__(self, model, segments=None):
        self.model = model
        self.segments = segments
        self._layouts = {}

    def _added(self, layer, e):
        return self.segments is not None and self.segments.has(layer, e)

    def layout(self, layer, e):
        if self._added(layer, e):
            return self.segments.layout(layer, e)
        lay = self._layouts.get(layer)
        if lay is None:
            lay = self._layouts[layer] = self.model.expert_layout(layer)
        return lay

    def nbytes(self, layer, e):
        return self.layout(layer, e).nbytes

    def read(self, layer, e):
        if self._added(layer, e):
            return self.segments.read(layer, e)
        return self.model.read_expert(layer, e)

    def view(self, layer, e):
        if self._added(layer, e):
            return self.segments.view(layer, e)
        return self.model.expert_blob(layer, e)

    def read_into(self, layer, e, take):
        """One pread of the blob at model.expert_location into take(nbytes), checked by the
        reader (CRC-32 and finite values, format/integrity.py). Falls back to read() + copy."""
        path = getattr(self.model, "path", None)
        if (self._added(layer, e) or path is None or not hasattr(self.model, "expert_location")
                or type(self).read is not _PLAIN_READ):     # read() wrapped (stress hooks): honour it
            arr = self.read(layer, e)
            buf = take(arr.nbytes)
            buf[:arr.nbytes] = arr
            return buf[:arr.nbytes], buf
        offset, nbytes, crc = self.model.expert_location(layer, e)
        buf = take(nbytes)
        blob = buf[:nbytes]
        got = _pread_uncached(path, buf, nbytes, offset)
        if got < nbytes:
            raise FormatError(f"{path}: layer {layer} expert {e}: short read ({got} of {nbytes} bytes)")
        check = getattr(self.model, "check_expert", None)
        if check is not None:           # the reader's check: CRC-32 and finite scales/weights
            check(layer, e, blob)
        elif zlib.crc32(blob) & 0xFFFFFFFF != crc:
            raise FormatError(f"{path}: layer {layer} expert {e} is damaged (checksum mismatch at "
                              f"offset {offset}, {nbytes} bytes)")
        return blob, buf


_PLAIN_READ = ModelSource.read
_DIRECT = getattr(os, "O_DIRECT", 0)


def _pread_uncached(path, buf, nbytes, offset):
    """Reads [offset, offset + nbytes) of path into buf without leaving it in the page cache: O_DIRECT
    (no copy in the kernel's cache, no read-ahead) when buf, offset and the page-rounded length allow it
    (store buffers and container blobs are page-aligned), else a buffered read with read-ahead off whose
    pages are dropped after. A copy in the page cache would double what a miss costs in RAM and, inside
    a memory limit, push out the dense weights the next token needs. Returns the bytes read (>= nbytes
    when complete; the page-rounded tail may run past nbytes)."""
    span = -(-nbytes // 4096) * 4096
    if _DIRECT and offset % 4096 == 0 and buf.nbytes >= span and buf.ctypes.data % 4096 == 0:
        try:
            fd = os.open(path, os.O_RDONLY | _DIRECT)
        except OSError:
            fd = None
        if fd is not None:
            try:
                return os.preadv(fd, [memoryview(buf)[:span]], offset)
            except OSError as exc:
                if exc.errno != errno.EINVAL:            # EINVAL: this file system refuses O_DIRECT reads
                    raise
            finally:
                os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    advise = getattr(os, "posix_fadvise", None)          # where O_DIRECT is missing, this may be too
    try:
        if advise:
            advise(fd, offset, nbytes, os.POSIX_FADV_RANDOM)
        got = os.preadv(fd, [memoryview(buf)[:nbytes]], offset)
        if advise:
            advise(fd, offset, nbytes, os.POSIX_FADV_DONTNEED)
        return got
    finally:
        os.close(fd)


class SlowSource:
    """Adds `delay_s` of latency to every read (a network share, a remote node)."""

    def __init__(self, inner, delay_s):
        self.inner = inner
        self.delay_s = float(delay_s)

    def read(self, layer, e):
        time.sleep(self.delay_s)
        return self.inner.read(layer, e)

    def read_into(self, layer, e, take):
        time.sleep(self.delay_s)
        return _read_into(self.inner, layer, e, take)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class FlakySource:
    """Raises on reads for which `fail(layer, e, attempt)` is true; counts reads."""

    def __init__(self, inner, fail):
        self.inner = inner
        self.fail = fail
        self.reads = 0
        self._lock = threading.Lock()

    def read(self, layer, e):
        with self._lock:
            self.reads += 1
            attempt = self.reads
        if self.fail(layer, e, attempt):
            raise OSError(f"injected source read failure (layer {layer}, expert {e})")
        return self.inner.read(layer, e)

    def read_into(self, layer, e, take):
        blob = self.read(layer, e)
        buf = take(blob.nbytes)
        buf[:blob.nbytes] = blob
        return buf[:blob.nbytes], buf

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _read_into(source, layer, e, take):
    if hasattr(source, "read_into"):
        return source.read_into(layer, e, take)
    blob = as_blob(source.read(layer, e))
    buf = take(blob.nbytes)
    buf[:blob.nbytes] = blob
    return buf[:blob.nbytes], buf


def read_into(source, layer, e, take):
    """(blob, buffer) from any source, through read_into when it has one."""
    return _read_into(source, layer, e, take)


def as_blob(array):
    """Check a source's answer is a flat uint8 array."""
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.ndim != 1:
        raise ColibriError(f"source returned {type(array).__name__} {getattr(array, 'dtype', '')}, "
                           "expected a 1-D uint8 array")
    return array
