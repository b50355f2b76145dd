"""Crash-safe file writes shared by the container writer, job outputs, hot-add segments and spills.

Role: whatever a reader finds under a final name is complete. A file is written
to a temp name beside its target, optionally fsync'd, then renamed over it; a
failure removes the temp file and leaves the previous state as it was.
"""
import os
import tempfile


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


def atomic_write(path, chunks, durable=True, replace=os.replace):
    """Write the byte chunks to `path` through `.<name>.tmp-*` beside it, then `replace` it into place.

    durable: fsync the file before the rename and the directory after it (off for scratch
    files such as spills). `replace` is the commit step; tests pass one that fails to
    simulate a crash between write and rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
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
