"""Token accounting: every token submitted comes back exactly once, with the reference bits.

Role in the data flow: the harness calls `submit(ids)` before a batch goes to
the pool and `check(ids, y, y_ref)` (or `fail(ids, error)`) when it returns.
A row is a mismatch when it differs bit for bit from the token's reference row.
By token id: a token whose reference row appears nowhere in the output is lost;
a reference row appearing more often than its token was sent (another token's
row replaced by it) is duplicated; a token completed twice is duplicated; a
token submitted but never completed is lost.
"""
import threading
from collections import Counter

import numpy as np


class TokenLedger:
    def __init__(self):
        self._lock = threading.Lock()
        self._open = set()          # submitted, not yet completed
        self._done = set()
        self.tokens = 0             # completed token count (all layers of a batch = one token)
        self.rows_checked = 0
        self.mismatches = 0
        self.lost = 0
        self.duplicated = 0
        self.errors = []            # (token count, message) of batches the pool failed

    def submit(self, ids):
        ids = [int(i) for i in np.asarray(ids).ravel()]
        with self._lock:
            for i in ids:
                if i in self._open or i in self._done:
                    raise ValueError(f"token id {i} submitted twice (harness bug)")
                self._open.add(i)

    def check(self, ids, outputs, references):
        """Compare one batch: outputs/references are lists of [n, h] arrays (one per layer)."""
        ids = np.asarray(ids).ravel()
        if len(outputs) != len(references):
            raise ValueError("outputs and references differ in layer count (harness bug)")
        mism = dup = rows = 0
        lost_rows = set()
        for y, ref in zip(outputs, references):
            m, lost_at, d = compare_rows(y, ref)
            mism, dup, rows = mism + m, dup + d, rows + len(ref)
            lost_rows |= lost_at
        lost = len(lost_rows)
        with self._lock:
            self.rows_checked += rows
            self.mismatches += mism
            self.lost += lost
            self.duplicated += dup
            self._complete(ids)
        return mism, lost, dup

    def fail(self, ids, error):
        """The pool raised for this batch: all its tokens are lost."""
        ids = np.asarray(ids).ravel()
        with self._lock:
            self.lost += len(ids)
            self.errors.append((len(ids), f"{type(error).__name__}: {error}"))
            self._complete(ids, count=False)

    def _complete(self, ids, count=True):
        for i in ids.tolist():
            if i in self._done:
                self.duplicated += 1
                continue
            if i not in self._open:
                raise ValueError(f"token id {i} completed but never submitted (harness bug)")
            self._open.discard(i)
            self._done.add(i)
            if count:
                self.tokens += 1

    def close(self):
        """End of run: tokens still open were never answered -> lost. Returns the count."""
        with self._lock:
            missing = len(self._open)
            self.lost += missing
            self._open.clear()
            return missing


def compare_rows(y, ref):
    """(mismatched rows, set of lost row positions, duplicated tokens) of one output block.

    A token is identified by the bytes of its reference row; the output must hold
    each reference row exactly as often as the reference does. An output of the
    wrong shape or dtype loses every token of the block.
    """
    ref = np.asarray(ref)
    y = np.asarray(y)
    if y.shape != ref.shape or y.dtype != ref.dtype:
        return len(ref), set(range(len(ref))), 0
    mismatched = sum(0 if np.array_equal(a, b) else 1 for a, b in zip(y, ref))
    if mismatched == 0:
        return 0, set(), 0
    keys = [r.tobytes() for r in ref]
    got = Counter(r.tobytes() for r in y)
    want = Counter(keys)
    lost_at = set()
    for pos in range(len(keys) - 1, -1, -1):     # deficits go to the last holders of a key
        k = keys[pos]
        if got.get(k, 0) < want[k]:
            lost_at.add(pos)
            want[k] -= 1
    want = Counter(keys)
    dup = sum(max(0, c - want[k]) for k, c in got.items() if k in want)
    return mismatched, lost_at, dup
