"""Crash-safe file writes shared by the container writer, job outputs, hot-add segments and spills.

Role: whatever a reader finds under a final name is complete. A file is written
to a temp name beside its target, optionally fsync'd, then renamed over it; a
failure removes the temp file and leaves the previous state as it was.
"""
import os
import tempfile
import threading

_UMASK_LOCK = threading.Lock()


def current_umask():
    """The process umask, read without changing it where Linux says it (/proc), else set-and-restore."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def fsync_dir(path):
    """Make a rename in `path` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path, chunks, durable=True, replace=os.replace, mode=None):
    """Write the byte chunks to `path` through `.<name>.tmp-*` beside it, then `replace` it into place.

    durable: fsync the file before the rename and the directory after it (off for scratch
    files such as spills). `replace` is the commit step; tests pass one that fails to
    simulate a crash between write and rename. mode: the file's permissions (default 0o666 minus the
    umask, as open() would give; mkstemp alone would leave 0600)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), (0o666 & ~current_umask()) if mode is None else mode)
            for chunk in chunks:
                f.write(memoryview(chunk))
            if durable:
                f.flush()
                os.fsync(f.fileno())
        replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, path) from exc     # ENOSPC & co name the file
        raise
    if durable:
        fsync_dir(directory)
