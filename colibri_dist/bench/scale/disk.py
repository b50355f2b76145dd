"""The disk's own read rate for what an expert miss costs: random reads of one expert's size, O_DIRECT.

Role: scale/run.py measures it beside every larger-than-RAM row, since the disk bounds what offload can
reach: bound tok/s = disk bytes/s / bytes a token must read. read_rate(path, block) reads `count` random
block-aligned chunks of the file with O_DIRECT (no page cache on either side) from `threads` threads and
returns bytes/s; the file must be at least one block. Falls back to buffered reads after dropping the
file's pages where O_DIRECT is refused (tmpfs), and says so.
"""
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .limits import drop_cache


def read_rate(path, block, count=64, threads=2, seed=0):
    size = os.path.getsize(path)
    block = max(4096, block // 4096 * 4096)
    if size < block:
        raise ValueError(f"{path}: {size} bytes, less than one {block}-byte read")
    offsets = np.random.default_rng(seed).integers(0, (size - block) // 4096 + 1, count) * 4096
    direct = True
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        direct, fd = False, os.open(path, os.O_RDONLY)
        drop_cache(path)
    bufs = [mmap.mmap(-1, block) for _ in range(threads)]      # page-aligned, as O_DIRECT wants

    def work(i):
        for off in offsets[i::threads]:
            os.preadv(fd, [bufs[i]], int(off))
    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, range(threads)))
        seconds = time.perf_counter() - t0
    finally:
        os.close(fd)
    return {"bytes_per_s": count * block / seconds, "block": block, "count": count, "threads": threads,
            "o_direct": direct}
