"""Progress bars for long format operations (convert, verify): tqdm on a terminal, silent otherwise."""
import contextlib
import sys


class _Silent:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass


@contextlib.contextmanager
def bar(total, desc, unit="B", enabled=True):
    """A tqdm bar on stderr when enabled and stderr is a terminal; a no-op object otherwise."""
    if not (enabled and sys.stderr.isatty()):
        yield _Silent()
        return
    from tqdm import tqdm
    with tqdm(total=total, desc=desc, unit=unit, unit_scale=True, unit_divisor=1024,
              file=sys.stderr, leave=False) as pbar:
        yield pbar
