"""Fault hooks installed inside every pool worker process (slow source reads).

Role in the data flow: the harness starts Ray with this module's
`install` as the worker process setup hook and COLIBRI_STRESS_CONTROL in the
environment. `install` wraps ModelSource.read (the store's bottom tier: the
container and the hot-add segments) so each read first sleeps for the delay
written in <control>/slow_source_ms. The harness turns a slow_source fault on
and off by rewriting that file; nothing else in the worker changes, and a
worker without the variable runs untouched.
"""
import os
import time

from ..fsutil import atomic_write

CONTROL_ENV = "COLIBRI_STRESS_CONTROL"
SLOW_FILE = "slow_source_ms"
_CHECK_EVERY_S = 0.05


class _Delay:
    """Delay in seconds read from a control file, re-read at most every 50 ms."""

    def __init__(self, path):
        self.path = path
        self._value = 0.0
        self._checked = 0.0
        self.slowed_reads = 0

    def seconds(self):
        now = time.monotonic()
        if now - self._checked >= _CHECK_EVERY_S:
            self._checked = now
            try:
                with open(self.path) as f:
                    self._value = max(0.0, float(f.read().strip() or 0)) / 1e3
            except (OSError, ValueError):
                self._value = 0.0
        return self._value


def install():
    """Ray worker_process_setup_hook: slow ModelSource.read when the control file says so."""
    control = os.environ.get(CONTROL_ENV)
    if not control:
        return
    from ..store import source
    if getattr(source.ModelSource.read, "_stress_slowed", False):
        return
    delay = _Delay(os.path.join(control, SLOW_FILE))
    plain_read = source.ModelSource.read

    def slowed_read(self, layer, e):
        pause = delay.seconds()
        if pause:
            delay.slowed_reads += 1
            time.sleep(pause)
        return plain_read(self, layer, e)

    slowed_read._stress_slowed = True
    source.ModelSource.read = slowed_read


def set_slow_source(control_dir, ms):
    """Driver side: turn the slowdown on (ms > 0) or off (0) for every worker."""
    os.makedirs(control_dir, exist_ok=True)
    path = os.path.join(control_dir, SLOW_FILE)
    atomic_write(path, [f"{float(ms)}\n".encode()], durable=False)
