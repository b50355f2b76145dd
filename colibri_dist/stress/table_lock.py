"""Readers-writer lock over the expert table of a stress run.

Role in the data flow: every job stream holds the read side for one whole batch
(pool call and reference call), the harness takes the write side to hot-add or
remove an expert on the pool and the reference together. So no batch ever sees
a table that the pool and the reference do not share. Writers go first: a
waiting writer stops new readers.
"""
import threading


class TableLock:
    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0

    def read(self):
        return _Side(self._acquire_read, self._release_read)

    def write(self):
        return _Side(self._acquire_write, self._release_write)

    def _acquire_read(self):
        with self._cond:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._readers += 1

    def _release_read(self):
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def _acquire_write(self):
        with self._cond:
            self._waiting_writers += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting_writers -= 1
            self._writer = True

    def _release_write(self):
        with self._cond:
            self._writer = False
            self._cond.notify_all()


class _Side:
    def __init__(self, acquire, release):
        self._acquire, self._release = acquire, release

    def __enter__(self):
        self._acquire()
        return self

    def __exit__(self, *exc):
        self._release()
