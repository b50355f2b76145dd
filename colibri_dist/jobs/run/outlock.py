"""One run per output directory: an flock on `<out>/.colibri-run.lock`, held for the whole run.

Role in the data flow: run_job takes it right after creating the output dir and
before reading the manifest or cleaning temp files, so a second `colibri run`
into the same --out (resume, --restart or an identical job) is refused with the
holder's pid instead of mixing shards or deleting the first run's live offload
tier. The kernel drops the lock when the holder exits, kill -9 included, so a
stale lock file never blocks anyone.
"""
import contextlib
import fcntl
import os

from ...errors import ColibriError

LOCK_NAME = ".colibri-run.lock"


class OutputBusy(ColibriError):
    """Another run holds the output directory."""


@contextlib.contextmanager
def hold_output_dir(out_dir):
    path = os.path.join(out_dir, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputBusy(f"{out_dir} is in use by another run (pid {_holder(fd)}); wait for it to finish "
                             f"or use another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)          # releases the flock


def _holder(fd):
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"
