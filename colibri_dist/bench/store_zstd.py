"""zstd on real expert blobs: ratio, compress and decode speed, break-even disk speed.

Role in the data flow: part of `python -m colibri_dist.bench store`; decides
whether the spill tier should compress. Loading a spilled blob costs
ratio/disk + 1/decode seconds per raw byte with zstd against 1/disk without,
so zstd pays only on disks slower than decode * (1 - ratio).
"""
import time

import numpy as np
import zstandard


def zstd_numbers(blob, level, reps=3):
    cctx, dctx = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
    t0 = time.perf_counter()
    for _ in range(reps):
        packed = cctx.compress(blob)
    t_c = (time.perf_counter() - t0) / reps
    out = np.empty(blob.nbytes, np.uint8)
    t0 = time.perf_counter()
    for _ in range(reps):
        reader = dctx.stream_reader(packed)
        view, done = memoryview(out), 0
        while done < out.nbytes:
            done += reader.readinto(view[done:])
    t_d = (time.perf_counter() - t0) / reps
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
