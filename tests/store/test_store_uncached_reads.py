"""A RAM-cache miss reads its expert around the page cache: O_DIRECT when the buffer, offset and length
allow it, else a buffered read with read-ahead off whose pages are dropped; the same bytes either way."""
import errno
import os

import numpy as np
import pytest

from colibri_dist.store import ExpertStore
from colibri_dist.store import source as src
from colibri_dist.store.buffers import aligned_empty

needs_direct = pytest.mark.skipif(not getattr(os, "O_DIRECT", 0), reason="this OS has no O_DIRECT")


def _spy_open(monkeypatch):
    flags = []
    real = os.open

    def spy(path, fl, *a):
        flags.append(fl)
        return real(path, fl, *a)
    monkeypatch.setattr(src.os, "open", spy)
    return flags


@needs_direct
def test_misses_read_with_o_direct_and_the_same_bytes(fake_model, monkeypatch):
    try:
        os.close(os.open(fake_model.path, os.O_RDONLY | os.O_DIRECT))
    except OSError as exc:
        pytest.skip(f"the test folder's file system refuses O_DIRECT ({exc}); the next test covers the fallback")
    flags = _spy_open(monkeypatch)
    with ExpertStore(fake_model, cache_bytes=fake_model.nbytes * 4) as store:
        for e in range(fake_model.config.n_experts):
            with store.get(1, e) as h:
                assert np.array_equal(h.blob, fake_model.blobs[(1, e)])
    direct = [f for f in flags if f & os.O_DIRECT]
    assert len(direct) == len(flags) == fake_model.config.n_experts     # every miss: one O_DIRECT read


def test_a_file_system_that_refuses_o_direct_gets_a_buffered_read(fake_model, monkeypatch):
    real = os.open
    advice = []

    def refuse(path, fl, *a):
        if fl & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "O_DIRECT refused")
        return real(path, fl, *a)
    monkeypatch.setattr(src.os, "open", refuse)
    real_advise = os.posix_fadvise
    monkeypatch.setattr(src.os, "posix_fadvise", lambda fd, o, n, a: advice.append(a) or real_advise(fd, o, n, a))
    with ExpertStore(fake_model, cache_bytes=fake_model.nbytes * 4) as store:
        with store.get(0, 3) as h:
            assert np.array_equal(h.blob, fake_model.blobs[(0, 3)])
    assert advice == [os.POSIX_FADV_RANDOM, os.POSIX_FADV_DONTNEED]


def test_an_unaligned_buffer_or_offset_is_read_buffered(fake_model, monkeypatch):
    off, n, _ = fake_model.expert_location(0, 5)
    want = fake_model.blobs[(0, 5)]
    page = aligned_empty(-(-n // 4096) * 4096 + 4096)
    flags = _spy_open(monkeypatch)
    shifted = page[1:1 + n + 4096]                                     # not page-aligned
    assert src._pread_uncached(fake_model.path, shifted, n, off) == n and np.array_equal(shifted[:n], want)
    assert src._pread_uncached(fake_model.path, page, n - 1, off + 1) == n - 1     # offset not page-aligned
    assert np.array_equal(page[:n - 1], want[1:])
    assert len(flags) == 2 and not any(f & getattr(os, "O_DIRECT", 0) for f in flags)
