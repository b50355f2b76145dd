"""stdout/stderr that survive a closed pipe: `colibri run ... | head` must not kill the job.

Role: cli.main wraps sys.stdout and sys.stderr in PipeSafe for the command's duration. A write or flush
that fails with BrokenPipeError (the reader went away: `| head`, a closed terminal) makes the stream
discard everything after it instead of raising, so a batch job finishes its shards, manifest and report
(its results are files); `closed_pipe` tells the caller to exit quietly.
"""
import sys


class PipeSafe:
    def __init__(self, stream):
        self._stream, self.broken = stream, False

    def write(self, text):
        if self.broken:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self.broken = True
            return len(text)

    def flush(self):
        if self.broken:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self.broken = True

    def isatty(self):
        return not self.broken and self._stream.isatty()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def install():
    """Wrap sys.stdout/sys.stderr; returns a restore() callable."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PipeSafe(sys.stdout), PipeSafe(sys.stderr)

    def restore():
        broken = sys.stdout.broken if isinstance(sys.stdout, PipeSafe) else False
        sys.stdout, sys.stderr = saved
        if broken:
            _silence_stdout()
    return restore


def _silence_stdout():
    """The interpreter flushes stdout at exit: point the fd at /dev/null so that flush cannot fail."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
