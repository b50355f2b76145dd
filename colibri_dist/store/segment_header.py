"""The 4096-byte header of one hot-added expert segment: pack, checksum, unpack, check.

Role in the data flow: segments.py writes a segment with pack_header and reads it back with
unpack_header, which refuses a damaged header before any field is used:

    [0, 8)     b"CBSEG002"
    [8, 12)    u32 little-endian length n of the JSON text
    [12, 16)   u32 CRC-32 of the whole 4096-byte header with these 4 bytes zeroed
    [16, 16+n) JSON: layer, expert, layout (matrices; expert biases' offsets and activation, if any), bias,
               blob/router offset, nbytes, crc32
    [16+n, 4096) zero

A flipped bit anywhere in the header is an IntegrityError naming the file; a field that is
missing, of the wrong type, out of the file or for another layer is a FormatError naming
the file and the field. Legacy b"CBSEG001" headers (JSON at byte 12, no checksum) get the
field checks only.
"""
import json
import math
import struct

from ..errors import FormatError, IntegrityError
from ..format import integrity

MAGIC = b"CBSEG002"
LEGACY_MAGIC = b"CBSEG001"
HEAD = 4096
_TEXT = 16
_INTS = ("layer", "expert", "blob_offset", "blob_nbytes", "blob_crc32", "router_offset",
         "router_nbytes", "router_crc32")
_MATRIX_INTS = ("dtype", "rows", "cols", "data_offset", "data_bytes", "scale_offset", "scale_count",
                "zero_offset")


def _header_crc(head):
    return integrity.crc32(head[_TEXT:], integrity.crc32(head[:12] + b"\0\0\0\0"))


def pack_header(meta):
    text = json.dumps(meta).encode()
    if _TEXT + len(text) > HEAD:
        raise FormatError(f"segment header too large ({len(text)} bytes)")
    head = bytearray((MAGIC + struct.pack("<I", len(text)) + b"\0\0\0\0" + text).ljust(HEAD, b"\0"))
    struct.pack_into("<I", head, 12, _header_crc(bytes(head)))
    return bytes(head)


def unpack_header(path, head, file_size, layer):
    """The checked JSON fields of a segment header (bytes of the first HEAD bytes)."""
    if len(head) < HEAD or head[:8] not in (MAGIC, LEGACY_MAGIC):
        raise FormatError(f"{path}: not a colibri expert segment")
    (n,) = struct.unpack_from("<I", head, 8)
    start = _TEXT if head[:8] == MAGIC else 12
    if head[:8] == MAGIC:
        (want,) = struct.unpack_from("<I", head, 12)
        if _header_crc(head) != want:
            raise IntegrityError(f"{path}: hot-added segment header is damaged (checksum mismatch)")
    if start + n > HEAD:
        raise FormatError(f"{path}: segment header length {n} exceeds the {HEAD}-byte header")
    try:
        meta = json.loads(head[start:start + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"{path}: segment header is not valid JSON ({type(exc).__name__})") from None
    check_fields(path, meta, file_size, layer)
    return meta


def _bad(path, what):
    raise FormatError(f"{path}: segment header field {what}")


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_fields(path, meta, file_size, layer):
    if not isinstance(meta, dict):
        _bad(path, f"block must be a JSON object, got {type(meta).__name__}")
    for key in _INTS:
        if not _int(meta.get(key)) or meta[key] < 0:
            _bad(path, f"{key!r} must be a non-negative integer, got {meta.get(key)!r}")
    bias = meta.get("bias")
    if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias):
        _bad(path, f"'bias' must be a finite number, got {bias!r}")
    if meta["layer"] != layer:
        _bad(path, f"'layer' is {meta['layer']}, but the manifest lists the file under layer {layer}")
    for part in ("blob", "router"):
        if meta[f"{part}_offset"] < HEAD or meta[f"{part}_offset"] + meta[f"{part}_nbytes"] > file_size:
            _bad(path, f"'{part}_offset'/'{part}_nbytes' [{meta[f'{part}_offset']}, +{meta[f'{part}_nbytes']}) "
                       f"outside the {file_size}-byte file")
    _check_layout(path, meta.get("layout"), meta["blob_nbytes"])


def _check_layout(path, layout, blob_nbytes):
    if not isinstance(layout, dict) or not isinstance(layout.get("scheme", "f32"), str) \
            or layout.get("nbytes") != blob_nbytes:
        _bad(path, f"'layout' must be an object whose nbytes equals blob_nbytes {blob_nbytes}")
    for part in ("gate", "up", "down"):
        mat = layout.get(part)
        if not isinstance(mat, dict) or set(mat) != set(_MATRIX_INTS) or not all(_int(mat[k]) for k in mat):
            _bad(path, f"'layout.{part}' must hold the integers {', '.join(_MATRIX_INTS)}, got {mat!r}")
    extra = set(layout) - {"gate", "up", "down", "nbytes", "scheme", "biases", "act"}
    if extra:
        _bad(path, f"'layout' has unknown keys {sorted(extra)}")
    biases = layout.get("biases")
    if biases is not None and not (isinstance(biases, list) and len(biases) == 3
                                   and all(_int(b) and 0 < b < blob_nbytes for b in biases)):
        _bad(path, f"'layout.biases' must be null or 3 offsets inside the blob, got {biases!r}")
    act = layout.get("act")
    if act is not None and not (isinstance(act, dict) and set(act) == {"kind", "alpha", "limit"}
                                and isinstance(act["kind"], str)
                                and all(_number(act[k]) for k in ("alpha", "limit"))):
        _bad(path, f"'layout.act' must be null or an object with kind, alpha, limit, got {act!r}")
