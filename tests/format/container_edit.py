"""Byte-level edits of a .colibri file for the hostile-input tests: change a field, then
recompute the checksums that cover it, so only the structural/semantic checks stand between
the edit and the readers (issue 15)."""
import struct

from colibri_dist.format import spec

# entry field -> (offset inside the 384-byte entry, struct code)
ENTRY_AT = {"name": (0, "128s"), "kind": (128, "<H"), "dtype": (130, "<H"), "layer": (132, "<i"),
            "expert": (136, "<i"), "ndim": (140, "<I"), "shape0": (144, "<q"), "shape1": (152, "<q"),
            "offset": (176, "<Q"), "nbytes": (184, "<Q"), "crc32": (192, "<I")}


def header(raw):
    return spec.unpack_header(bytes(raw[:spec.HEADER_SIZE]))


def entry_base(raw, i):
    return header(raw)["table_offset"] + i * spec.ENTRY_SIZE


def entries(raw):
    h = header(raw)
    return [spec.Entry.unpack(bytes(raw[entry_base(raw, i):entry_base(raw, i) + spec.ENTRY_SIZE]))
            for i in range(h["table_count"])]


def find(raw, pred):
    return next(i for i, e in enumerate(entries(raw)) if pred(e))


def set_entry(raw, i, field, value):
    off, code = ENTRY_AT[field]
    if field == "name":
        value = value.encode() if isinstance(value, str) else value
    struct.pack_into(code, raw, entry_base(raw, i) + off, value)


def fix_entry_crc(raw, i):
    e = entries(raw)[i]
    struct.pack_into("<I", raw, entry_base(raw, i) + 192, spec.crc32(bytes(raw[e.offset:e.offset + e.nbytes])))


def fix_crcs(raw):
    """Table, metadata and header CRCs recomputed (entry data CRCs are left alone)."""
    h = header(raw)
    t0, n = h["table_offset"], h["table_count"]
    struct.pack_into("<I", raw, 64, spec.crc32(bytes(raw[t0:t0 + n * spec.ENTRY_SIZE])))
    m0 = h["meta_offset"]
    struct.pack_into("<I", raw, 68, spec.crc32(bytes(raw[m0:m0 + h["meta_bytes"]])))
    struct.pack_into("<I", raw, spec.HEADER_CRC_SPAN, spec.crc32(bytes(raw[:spec.HEADER_CRC_SPAN])))
    return raw


def set_meta(raw, meta):
    """Replace the metadata block (it is last in the file) and fix sizes and CRCs."""
    h = header(raw)
    out = bytearray(raw[:h["meta_offset"]]) + meta
    struct.pack_into("<Q", out, 48, len(meta))
    struct.pack_into("<Q", out, 56, len(out))
    return fix_crcs(out)
