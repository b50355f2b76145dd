"""SSD offload tier: evicted experts spill to local files and come back with one read.

Role in the data flow: ExpertStore writes an entry here when it evicts it from
RAM (if an offload_dir was given) and looks here before going back to the
source. One file per expert in a private directory under offload_dir:

    [0, 4096)        header: magic, codec, raw length, stored length, checksum, layer, expert
    [4096, ...)      payload: the blob, raw or zstd-compressed

Files are written to a temp name and renamed, so a reader never sees half a
file. The store keeps (length, checksum) of every file it wrote in memory, so a
load is one pread of the payload (O_DIRECT with an aligned buffer where the
filesystem allows, else buffered) plus a checksum check. A mismatch discards the
file and reports it; the store then refetches from the source.

Failures to write (disk full, unwritable dir) disable spilling with one warning:
the store keeps serving from the source, and from spill files already written.
A full disk (ENOSPC, EDQUOT) is retried silently every `retry_s` seconds, so
spilling resumes once space is freed; any other write error is permanent.
"""
import errno
import os
import shutil
import struct
import tempfile
import threading
import time
import warnings

import numpy as np

from ..errors import InvalidArgument
from ..fsutil import atomic_write
from .buffers import PAGE, aligned_empty

MAGIC = b"CBSPILL1"
HEADER = struct.Struct("<8sIIQQQii")     # magic, codec, level, raw_len, stored_len, checksum, layer, expert
CODECS = {None: 0, "none": 0, "zstd": 1}


def checksum(blob):
    """Position-weighted 64-bit block sum of a uint8 array (~40 GB/s in numpy, against
    ~1-3 GB/s for zlib.crc32, which would cap spill loads below disk speed).
    Per 4 KiB block: the wrapping sum of its 64-bit words, weighted by an odd
    factor 2i+1 (so any single-word change and any block reordering changes
    the result), plus the tail and the length. Spill files are private scratch,
    so this detects torn writes and media corruption, not an adversary."""
    blob = np.asarray(blob).reshape(-1).view(np.uint8)
    n = blob.nbytes
    words = blob[:n // 8 * 8].view(np.uint64)
    nblk = words.size // 512
    sums = words[:nblk * 512].reshape(nblk, 512).sum(axis=1, dtype=np.uint64)
    tail = np.zeros(1, np.uint64)
    tail[0] = words[nblk * 512:].sum(dtype=np.uint64)
    tail_bytes = blob[n // 8 * 8:].astype(np.uint64)
    weights = np.arange(nblk + 1, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    total = (np.concatenate([sums, tail]) * weights).sum(dtype=np.uint64)
    total += (tail_bytes * (np.arange(tail_bytes.size, dtype=np.uint64) + np.uint64(3))).sum(dtype=np.uint64)
    return int(total) ^ n


def round_up(n, align=PAGE):
    return (n + align - 1) // align * align


class SpillCorrupt(Exception):
    """A spill file failed its checksum (internal; the store counts and refetches)."""


class SpillTier:
    def __init__(self, offload_dir, compression=None, zstd_level=3, direct_io=True, retry_s=30.0):
        if compression not in CODECS:
            raise InvalidArgument(f"compression must be None, 'none' or 'zstd', got {compression!r}")
        self.codec = CODECS[compression]
        self.zstd_level = int(zstd_level)
        self.direct_io = direct_io
        self._index = {}            # key -> (raw_len, stored_len, checksum)
        self._lock = threading.Lock()
        self._warned = False
        self._retry_at = None       # monotonic time to try writing again (disk full)
        self.retry_s = float(retry_s)
        self.enabled = False
        self.spill_bytes = 0        # payload bytes written
        self.disabled_reason = None
        self._local = threading.local()
        self.dir = None
        try:
            os.makedirs(offload_dir, exist_ok=True)
            self.dir = tempfile.mkdtemp(prefix="colibri-spill-", dir=offload_dir)
            self.enabled = True
        except OSError as exc:
            self._disable(f"offload dir {offload_dir!r} is not writable ({exc})")

    # ---- codecs (one compressor object per thread: zstd contexts are not thread safe)
    def _zstd(self):
        import zstandard
        loc = self._local
        if not hasattr(loc, "cctx"):
            loc.cctx = zstandard.ZstdCompressor(level=self.zstd_level)
            loc.dctx = zstandard.ZstdDecompressor()
        return loc.cctx, loc.dctx

    def _disable(self, reason, transient=False):
        self.enabled = False
        self.disabled_reason = reason
        self._retry_at = time.monotonic() + self.retry_s if transient else None
        if not self._warned:
            self._warned = True
            warnings.warn(f"colibri store: spilling to SSD disabled, serving from the source: {reason}",
                          RuntimeWarning, stacklevel=3)

    def writable(self):
        """Spilling on, or a disk-full pause whose retry time has come."""
        if not self.enabled and self._retry_at is not None and time.monotonic() >= self._retry_at:
            self._retry_at = None
            self.enabled = True
        return self.enabled

    def readable(self):
        return self.dir is not None

    def path(self, key):
        layer, expert = key
        return os.path.join(self.dir, f"L{layer}-E{expert}.spill")

    def has(self, key):
        with self._lock:
            return key in self._index

    # ---- write
    def write(self, key, blob):
        """Spill one blob (uint8). Returns True if the file is in place."""
        if not self.writable() or self.has(key):
            return False
        payload = blob if self.codec == 0 else self._zstd()[0].compress(blob)
        crc = checksum(blob)
        header = HEADER.pack(MAGIC, self.codec, self.zstd_level, blob.nbytes, len(payload), crc, *key)
        try:
            self._write_file(self.path(key), header.ljust(PAGE, b"\0"), payload)
        except OSError as exc:
            self._disable(f"writing {self.path(key)} failed ({exc})",
                          transient=exc.errno in (errno.ENOSPC, errno.EDQUOT))
            return False
        with self._lock:
            self._index[key] = (blob.nbytes, len(payload), crc)
            self.spill_bytes += len(payload)
        return True

    def _write_file(self, path, header, payload):
        """temp + rename so a reader never sees a partial file; no fsync: spills are scratch
        and carry their own checksum (tests patch this)."""
        atomic_write(path, [header, payload], durable=False)

    # ---- read
    def read(self, key, take_buffer):
        """Blob for key or None if not spilled. take_buffer(nbytes) gives an
        aligned buffer of at least round_up(nbytes) bytes. Raises SpillCorrupt
        (after discarding the file) on a checksum mismatch."""
        with self._lock:
            meta = self._index.get(key)
        if meta is None:
            return None
        raw_len, stored_len, crc = meta
        try:
            if self.codec == 0:
                buf = take_buffer(raw_len)
                self._pread(self.path(key), buf, stored_len)
                blob = buf[:raw_len]
            else:
                scratch = aligned_empty(round_up(stored_len))
                self._pread(self.path(key), scratch, stored_len)
                buf = take_buffer(raw_len)
                self._decompress(scratch[:stored_len], buf[:raw_len])
                blob = buf[:raw_len]
        except (OSError, ValueError, RuntimeError) as exc:
            self.discard(key)
            raise SpillCorrupt(f"{self.path(key)}: {exc}") from exc
        if checksum(blob) != crc:
            self.discard(key)
            raise SpillCorrupt(f"{self.path(key)}: checksum mismatch")
        return blob, buf

    def _pread(self, path, buf, nbytes):
        """Read payload bytes [PAGE, PAGE + nbytes) into buf with one read call."""
        want = round_up(nbytes)
        fd = self._open_direct(path) if self.direct_io else None
        if fd is not None:
            try:
                got = os.preadv(fd, [memoryview(buf)[:want]], PAGE)
            except OSError:
                got = None
            finally:
                os.close(fd)
            if got is not None and got >= nbytes:
                return
        fd = os.open(path, os.O_RDONLY)
        try:
            got = os.preadv(fd, [memoryview(buf)[:nbytes]], PAGE)
        finally:
            os.close(fd)
        if got != nbytes:
            raise OSError(f"short read: {got} of {nbytes} bytes")

    def _open_direct(self, path):
        flag = getattr(os, "O_DIRECT", 0)
        if not flag:
            return None
        try:
            return os.open(path, os.O_RDONLY | flag)
        except OSError:          # filesystem without O_DIRECT (tmpfs): buffered read
            return None

    def _decompress(self, payload, out):
        reader = self._zstd()[1].stream_reader(memoryview(payload))
        view, done = memoryview(out), 0
        while done < out.nbytes:
            n = reader.readinto(view[done:])
            if n == 0:
                raise ValueError(f"zstd payload decoded to {done} of {out.nbytes} bytes")
            done += n

    def discard(self, key):
        with self._lock:
            self._index.pop(key, None)
        try:
            os.unlink(self.path(key))
        except OSError:
            pass

    def close(self):
        with self._lock:
            self._index.clear()
        if self.dir and os.path.isdir(self.dir):
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
        self.enabled = False
        self._retry_at = None
