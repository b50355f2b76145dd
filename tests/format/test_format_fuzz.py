"""Random single-byte damage and random truncation: both readers fail cleanly, never crash.

Every byte a checksum covers (header, table, metadata, tensors and blobs) must
be reported as a FormatError by the Python reader (at open or by verify()) and
as CB_E_FORMAT by cb_model_open(verify=1) - except metadata bytes, which the C
reader never reads. Padding between tensors is not covered and may pass.
"""
import os
import re
import shutil

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import FormatError
from colibri_dist.format import spec


def _covered(model):
    h = model.header
    spans = [(0, spec.HEADER_SIZE, "header"),
             (h["table_offset"], h["table_offset"] + h["table_count"] * spec.ENTRY_SIZE, "table"),
             (h["meta_offset"], h["meta_offset"] + h["meta_bytes"], "meta")]
    spans += [(e.offset, e.offset + e.nbytes, "data") for e in model.entries]
    return spans


def _region(spans, pos):
    return next((kind for a, b, kind in spans if a <= pos < b), None)


def _python_rejects(path):
    try:
        with cd.open_model(path) as model:
            model.verify(progress=False)
    except FormatError as exc:
        assert str(path) in str(exc)
        return True
    return False


def _c_status(path):
    from colibri_dist._native import ffi, lib
    out = ffi.new("cb_model **")
    status = lib.cb_model_open(os.fsencode(path), 1, out)
    if status == 0:
        lib.cb_model_close(out[0])
    return status


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    from colibri_dist.format import tiny
    d = tmp_path_factory.mktemp("fuzz")
    tiny.write_tiny("qwen2_moe", d / "src")
    cd.convert(d / "src", d / "m.colibri", experts="int8-minmax", progress=False)
    return d / "m.colibri"


def test_random_byte_flips(original, tmp_path):
    with cd.open_model(original) as model:
        spans = _covered(model)
    size = os.path.getsize(original)
    rng = np.random.default_rng(2024)
    # half anywhere, half inside the header and table where parsing happens
    table_start = spans[1][0]
    positions = list(rng.integers(0, size, 40)) + list(rng.integers(0, spec.HEADER_SIZE, 15)) \
        + list(rng.integers(table_start, spans[1][1], 25))
    work = tmp_path / "f.colibri"
    covered = 0
    for pos in positions:
        shutil.copy(original, work)
        with open(work, "r+b") as fh:
            fh.seek(pos)
            byte = fh.read(1)[0]
            fh.seek(pos)
            fh.write(bytes([byte ^ (1 << int(rng.integers(0, 8)))]))
        region = _region(spans, int(pos))
        py, c = _python_rejects(work), _c_status(work)
        assert c in (0, 4), (pos, c)
        if region is not None:
            covered += 1
            assert py, f"byte {pos} ({region}) damaged but the Python reader accepted the file"
            assert c == 4 or region == "meta", f"byte {pos} ({region}) damaged but cb_model_open accepted it"
    assert covered >= len(positions) // 2


def test_random_truncations(original, tmp_path):
    size = os.path.getsize(original)
    work = tmp_path / "t.colibri"
    for keep in sorted(set(np.random.default_rng(7).integers(0, size, 30).tolist()) | {0, 511, 512, 4096, size - 1}):
        shutil.copy(original, work)
        os.truncate(work, keep)
        with pytest.raises(FormatError, match="truncated"):
            cd.open_model(work)
        assert _c_status(work) == 4


def test_structural_damage_with_valid_checksums(original, tmp_path):
    """Random header/table field damage with the CRCs recomputed: the structural checks alone
    must reject it cleanly, and both readers must agree on accept/reject."""
    import struct
    data = open(original, "rb").read()
    h = spec.unpack_header(data)
    t0, n = h["table_offset"], h["table_count"]
    rng = np.random.default_rng(99)
    work = tmp_path / "s.colibri"
    rejected = 0
    for i in range(120):
        b = bytearray(data)
        pos = t0 + int(rng.integers(0, n)) * spec.ENTRY_SIZE + int(rng.integers(128, 344)) if i % 2 \
            else int(rng.integers(8, spec.HEADER_CRC_SPAN))
        b[pos] = int(rng.integers(0, 256))
        struct.pack_into("<I", b, 64, spec.crc32(bytes(b[t0:t0 + n * spec.ENTRY_SIZE])))
        struct.pack_into("<I", b, spec.HEADER_CRC_SPAN, spec.crc32(bytes(b[:spec.HEADER_CRC_SPAN])))
        work.write_bytes(bytes(b))
        py, c = _python_rejects(work), _c_status(work)
        assert c in (0, 4) and py == (c == 4), (pos, py, c)
        rejected += py
    assert rejected >= 30


def test_c_reader_memory_safe_under_asan(original, tmp_path):
    """Build the C reader with ASan+UBSan and open 60 damaged files (CRC-fixed structural
    damage, raw flips, truncations): no sanitizer report, every file accepted or rejected."""
    import struct
    import subprocess
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    root = os.path.join(os.path.dirname(__file__), "..", "..", "native")
    srcs = [os.path.join(root, "src", f) for f in ("model.c", "model_parse.c", "encodings.c", "crc32.c", "crc32_fast.c",
                                                   "status.c")]
    exe = tmp_path / "driver"
    subprocess.run([cc, "-std=c11", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-D_GNU_SOURCE", "-I" + os.path.join(root, "include"), "-I" + os.path.join(root, "src"),
                    os.path.join(os.path.dirname(__file__), "format_asan_driver.c"), *srcs, "-o", str(exe)],
                   check=True, capture_output=True)
    data = open(original, "rb").read()
    h = spec.unpack_header(data)
    t0, n = h["table_offset"], h["table_count"]
    rng = np.random.default_rng(5)
    files = []
    for i in range(60):
        b = bytearray(data)
        pos = t0 + int(rng.integers(0, n * spec.ENTRY_SIZE)) if i % 2 else int(rng.integers(8, 508))
        b[pos] = int(rng.integers(0, 256))
        if i % 3:
            struct.pack_into("<I", b, 64, spec.crc32(bytes(b[t0:t0 + n * spec.ENTRY_SIZE])))
            struct.pack_into("<I", b, spec.HEADER_CRC_SPAN, spec.crc32(bytes(b[:spec.HEADER_CRC_SPAN])))
        if i % 10 == 0:
            b = b[:int(rng.integers(0, len(b)))]
        files.append(tmp_path / f"{i}.colibri")
        files[-1].write_bytes(bytes(b))
    files.append(original)
    res = subprocess.run([str(exe), *map(str, files)], capture_output=True, text=True,
                         env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ERROR" not in res.stderr and "runtime error" not in res.stderr, res.stderr[-3000:]
    rejected, total = map(int, re.match(r"(\d+) rejected of (\d+)", res.stdout).groups())
    assert total == len(files) and 0 < rejected < total      # the undamaged original opens
