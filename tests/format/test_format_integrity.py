"""format/integrity.py: the native CRC-32 equals zlib.crc32 (any length, alignment, chaining)
and the NaN/Inf scans equal numpy's, with and without the compiled core."""
import zlib

import numpy as np
import pytest

from colibri_dist.format import integrity


@pytest.fixture(params=["native", "fallback"])
def impl(request, monkeypatch):
    if request.param == "fallback":
        monkeypatch.setattr(integrity, "_native", False)
    else:
        import colibri_dist.native  # noqa: F401  (importing the core registers its fast checks)
        assert integrity._lib(), "the compiled core is missing"
    return request.param


def test_crc32_equals_zlib(impl):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 70000, dtype=np.uint8)
    for n in list(range(0, 200)) + [1000, 4095, 4096, 65537]:
        for off in (0, 1, 7):
            v = data[off:off + n]
            assert integrity.crc32(v) == zlib.crc32(v.tobytes())
            assert integrity.crc32(v, 0xDEADBEEF) == zlib.crc32(v.tobytes(), 0xDEADBEEF)
    a, b = data[:5000], data[5000:12345]
    assert integrity.crc32(b, integrity.crc32(a)) == zlib.crc32(data[:12345].tobytes())


def test_count_nonfinite_equals_numpy(impl):
    rng = np.random.default_rng(1)
    f32 = rng.standard_normal(1000).astype(np.float32)
    f32[[3, 500, 999]] = [np.nan, np.inf, -np.inf]
    assert integrity.count_nonfinite(f32.view(np.uint8), 0) == 3
    f16 = rng.standard_normal(777).astype(np.float16)
    f16[[0, 10]] = [np.inf, np.nan]
    assert integrity.count_nonfinite(f16.view(np.uint8), 1) == 2
    words = (f32.view(np.uint32) >> 16).astype(np.uint16)          # bf16: the high halves
    assert integrity.count_nonfinite(words.view(np.uint8), 2) == 3
    assert integrity.count_nonfinite(np.zeros(0, np.uint8), 0) == 0


def test_entry_problem_for_blobs_matrices_and_tensors():
    from types import SimpleNamespace
    from colibri_dist.format.quantize import pack_expert
    blob, layout = pack_expert(np.ones((4, 8), np.float32), np.ones((4, 8), np.float32),
                               np.ones((8, 4), np.float32), "int8")
    entry = SimpleNamespace(crc32=integrity.crc32(blob), offset=4096, nbytes=blob.nbytes, dtype=4)
    assert integrity.entry_problem(blob, entry, layout) is None
    bad = blob.copy()
    bad[layout.up.scale_offset:layout.up.scale_offset + 4] = np.frombuffer(np.float32(np.nan).tobytes(), np.uint8)
    entry.crc32 = integrity.crc32(bad)
    assert integrity.entry_problem(bad, entry, layout) == "invalid: up has 1 non-finite scale(s)"
    assert integrity.entry_problem(bad, entry, layout.up) == "invalid: matrix has 1 non-finite scale(s)"
    assert integrity.entry_problem(bad, entry, layout.gate) is None      # one encoded matrix alone
    entry.crc32 ^= 1
    assert integrity.entry_problem(bad, entry, layout).startswith("damaged (checksum mismatch")
    t = np.array([1.0, np.inf], np.float32).view(np.uint8)
    tensor = SimpleNamespace(crc32=integrity.crc32(t), offset=64, nbytes=8, dtype=0)
    assert integrity.entry_problem(t, tensor) == "invalid: 1 non-finite value(s)"
