"""Hot-added segment headers carry a CRC-32 (issue 21 item 10): a flipped bit anywhere in the
4096 header bytes is an IntegrityError naming the file, a bad field a FormatError naming it,
never a KeyError or a silently different bias; legacy CBSEG001 headers get the field checks."""
import json
import os
import struct

import numpy as np
import pytest

from colibri_dist.errors import FormatError, IntegrityError
from colibri_dist.store import Segments
from colibri_dist.store.segment_header import HEAD, LEGACY_MAGIC

from store_fakes import fake_layout


def _one_segment(tmp_path):
    path = tmp_path / "m.colibri"
    blob = np.random.default_rng(1).integers(0, 256, 4096 + 640, dtype=np.uint8)
    row = np.linspace(-1, 1, 32, dtype=np.float32)
    Segments(path).add(0, 8, blob, fake_layout(blob.nbytes), row, bias=0.0)
    seg = Segments(path)
    return path, seg._entries[(0, 8)]["path"]


def _flip(file, byte, bit):
    with open(file, "r+b") as f:
        f.seek(byte)
        old = f.read(1)[0]
        f.seek(byte)
        f.write(bytes([old ^ (1 << bit)]))


def test_flipped_bias_bit_is_integrity_error(tmp_path):
    path, seg_file = _one_segment(tmp_path)
    head = open(seg_file, "rb").read(HEAD)
    at = head.index(b'"bias": 0.0') + len('"bias": ')
    _flip(seg_file, at, 3)                                 # "0.0" -> "8.0", the example
    with pytest.raises(IntegrityError, match=f"{seg_file}: hot-added segment header is damaged"):
        Segments(path)


def test_random_header_flips_are_named_errors(tmp_path):
    path, seg_file = _one_segment(tmp_path)
    pristine = open(seg_file, "rb").read()
    (n,) = struct.unpack_from("<I", pristine, 8)
    rng = np.random.default_rng(21)
    spots = [(int(b), int(rng.integers(8))) for b in rng.integers(0, 16 + n, 64)]
    spots += [(int(b), int(rng.integers(8))) for b in rng.integers(16 + n, HEAD, 8)]   # the zero padding too
    for byte, bit in spots:
        with open(seg_file, "wb") as f:
            f.write(pristine)
        _flip(seg_file, byte, bit)
        with pytest.raises(FormatError) as info:
            Segments(path)
        assert seg_file in str(info.value), (byte, bit, str(info.value))
        assert isinstance(info.value, IntegrityError) or byte < 8, (byte, bit, str(info.value))


def _legacy(seg_file, edit):
    """Rewrite the segment with a CBSEG001 header (no checksum) after edit(meta)."""
    raw = open(seg_file, "rb").read()
    (n,) = struct.unpack_from("<I", raw, 8)
    meta = json.loads(raw[16:16 + n])
    edit(meta)
    text = json.dumps(meta).encode()
    with open(seg_file, "wb") as f:
        f.write((LEGACY_MAGIC + struct.pack("<I", len(text)) + text).ljust(HEAD, b"\0") + raw[HEAD:])


def test_legacy_header_still_loads(tmp_path):
    path, seg_file = _one_segment(tmp_path)
    _legacy(seg_file, lambda m: m.update(bias=0.5))
    assert Segments(path).bias(0, 8) == 0.5


@pytest.mark.parametrize("edit, field", [
    (lambda m: m.pop("bias"), "'bias'"),
    (lambda m: m.update(bias="8.0"), "'bias'"),
    (lambda m: m.pop("router_crc32"), "'router_crc32'"),
    (lambda m: m.update(blob_nbytes=1 << 40), "'blob_offset'/'blob_nbytes'"),
    (lambda m: m.update(layer=3), "'layer' is 3"),
    (lambda m: m["layout"]["gate"].pop("rows"), "'layout.gate'"),
    (lambda m: m["layout"].update(nbytes=7), "'layout'"),
], ids=["no-bias", "str-bias", "no-crc", "past-end", "other-layer", "no-rows", "nbytes"])
def test_bad_legacy_fields_are_format_errors_naming_the_field(tmp_path, edit, field):
    path, seg_file = _one_segment(tmp_path)
    _legacy(seg_file, edit)
    with pytest.raises(FormatError) as info:
        Segments(path)
    assert seg_file in str(info.value) and field in str(info.value), str(info.value)
