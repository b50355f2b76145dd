"""zstd on real expert blobs: ratio, compress and decode speed, break-even disk speed.

Role in the data flow: part of `python -m colibri_dist.bench store`; decides
whether the spill tier should compress. Loading a spilled blob costs
ratio/disk + 1/decode seconds per raw byte with zstd against 1/disk without,
so zstd pays only on disks slower than decode * (1 - ratio).
"""
import time

import numpy as np
import zstandard


def _best(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def _decode(dctx, packed, out):
    reader = dctx.stream_reader(packed)          # the spill tier's decode path (into a given buffer)
    view, done = memoryview(out), 0
    while done < out.nbytes:
        done += reader.readinto(view[done:])


def zstd_numbers(blob, level, reps=5):
    """Best-of-reps compress and decode times (the machine is shared)."""
    cctx, dctx = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
    t_c, packed = _best(lambda: cctx.compress(blob), reps)
    out = np.empty(blob.nbytes, np.uint8)
    t_d, _ = _best(lambda: _decode(dctx, packed, out), reps)
    assert np.array_equal(out, blob)
    ratio = len(packed) / blob.nbytes
    decode = blob.nbytes / t_d / 1e9
    return {"level": level, "ratio": ratio, "compress_gbs": blob.nbytes / t_c / 1e9, "decode_gbs": decode,
            "breakeven_disk_gbs": decode * (1.0 - ratio)}


def zstd_table(samples, levels, disk_gbs):
    """samples: name -> uint8 blob. disk_gbs: measured raw disk read speed."""
    rows = []
    for name, blob in samples.items():
        for level in levels:
            r = zstd_numbers(blob, level)
            r.update(sample=name, nbytes=int(blob.nbytes),
                     pays_on_this_disk=bool(disk_gbs < r["breakeven_disk_gbs"]),
                     load_gbs_with_zstd=1.0 / (r["ratio"] / disk_gbs + 1.0 / r["decode_gbs"]))
            rows.append(r)
    return rows
