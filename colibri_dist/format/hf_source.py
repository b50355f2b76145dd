"""Read Hugging Face safetensors checkpoints one tensor (or one expert slice) at a time.

Role in the data flow: convert.py's only window on the source. The safetensors
header (8-byte little-endian length + JSON) is parsed here directly, and data
is fetched with os.pread of exactly the bytes needed: no mmap of whole shards
(page cache is not counted as ours) and no torch (bf16 is widened to f32 with
a bit shift). Single files and sharded checkpoints (model.safetensors.index.json)
both work.
"""
import json
import os
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError
from . import spec

FLOAT_SOURCES = ("F32", "F16", "BF16")
_ITEM = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
         "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


@dataclass(frozen=True)
class TensorRef:
    name: str
    file: str
    dtype: str        # safetensors dtype string
    shape: tuple
    start: int        # absolute file offset of the data
    nbytes: int


class SafetensorsSource:
    def __init__(self, src_dir):
        self.dir = os.fspath(src_dir)
        self.refs = {}
        self._fds = {}
        self._lock = threading.Lock()
        for path in _shard_files(self.dir):
            for ref in _parse_header(path):
                self.refs[ref.name] = ref

    def close(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __contains__(self, name):
        return name in self.refs

    def total_bytes(self):
        return sum(r.nbytes for r in self.refs.values())

    def files(self):
        return sorted({r.file for r in self.refs.values()})

    def ref(self, name):
        ref = self.refs.get(name)
        if ref is None:
            raise FormatError(f"{self.dir}: checkpoint is missing tensor {name!r}")
        return ref

    def _fd(self, path):
        with self._lock:        # convert.read_ahead reads from a helper thread too
            if path not in self._fds:
                self._fds[path] = os.open(path, os.O_RDONLY)
            return self._fds[path]

    def stored_scheme(self, name):
        """None: safetensors hold float or integer tensors, never a colibri block encoding (gguf_source.py does)."""
        return None

    def read_raw(self, ref, start=0, nbytes=None):
        nbytes = ref.nbytes - start if nbytes is None else nbytes
        data = os.pread(self._fd(ref.file), nbytes, ref.start + start)
        if len(data) != nbytes:
            raise FormatError(f"{ref.file}: tensor {ref.name!r} truncated ({len(data)} of {nbytes} bytes)")
        return data

    def read_f32(self, name, shape, index=None):
        """Tensor `name` (or its slice [index] along dim 0) as float32 of `shape`, checked."""
        ref = self.ref(name)
        if ref.dtype not in FLOAT_SOURCES:
            raise FormatError(f"{ref.file}: tensor {name!r} has unsupported dtype {ref.dtype} "
                              f"(expected one of {', '.join(FLOAT_SOURCES)})")
        full = tuple(shape) if index is None else (ref.shape[0],) + tuple(shape)
        if ref.shape != full or (index is not None and not 0 <= index < ref.shape[0]):
            raise FormatError(f"{ref.file}: tensor {name!r} has shape {list(ref.shape)}, expected {list(full)}")
        count = int(np.prod(shape))
        return self._pread_f32(ref, (0 if index is None else index * count) * _ITEM[ref.dtype], count).reshape(shape)

    def _pread_f32(self, ref, offset, count):
        """`count` values of ref from byte `offset` of its data, as float32; a short read names the tensor."""
        raw = np.empty(count * _ITEM[ref.dtype], dtype=np.uint8)
        got = os.preadv(self._fd(ref.file), [raw], ref.start + offset)
        if got != raw.nbytes:
            raise FormatError(f"{ref.file}: tensor {ref.name!r} truncated ({got} of {raw.nbytes} bytes)")
        return to_f32(raw, ref.dtype)

    def read_rows_f32(self, name, r0, r1):
        """Rows [r0, r1) of a 2-D float tensor as float32 [r1 - r0, cols] (bounded reads of big matrices)."""
        ref = self.ref(name)
        if ref.dtype not in FLOAT_SOURCES or len(ref.shape) != 2 or not 0 <= r0 < r1 <= ref.shape[0]:
            raise FormatError(f"{ref.file}: tensor {name!r} ({ref.dtype} {list(ref.shape)}): cannot read rows "
                              f"{r0}:{r1} as float32")
        cols = ref.shape[1]
        return self._pread_f32(ref, r0 * cols * _ITEM[ref.dtype], (r1 - r0) * cols).reshape(r1 - r0, cols)

    def chunks(self, ref, chunk_bytes=64 << 20):
        """Raw bytes of a tensor in bounded pieces (dense tensors are copied as they come)."""
        for start in range(0, ref.nbytes, chunk_bytes):
            yield self.read_raw(ref, start, min(chunk_bytes, ref.nbytes - start))


def to_f32(raw, dtype):
    """Little-endian F32/F16/BF16 bytes (bytes or uint8 array) -> float32 array."""
    if dtype == "F32":
        arr = np.frombuffer(raw, dtype="<f4")
        return arr if isinstance(raw, np.ndarray) else arr.copy()
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float32)
    words = np.frombuffer(raw, dtype="<u2")
    out = np.empty(words.size, dtype=np.uint32)
    np.left_shift(words, 16, out=out, dtype=np.uint32)   # bf16 = the high half of an f32
    return out.view(np.float32)


def storage_dtype(ref):
    code = spec.SAFETENSORS_DTYPES.get(ref.dtype)
    if code is None:
        raise FormatError(f"{ref.file}: tensor {ref.name!r} has unsupported dtype {ref.dtype} "
                          f"(supported: {', '.join(spec.SAFETENSORS_DTYPES)})")
    return code


def _shard_files(src_dir):
    index = os.path.join(src_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            weight_map = json.load(open(index, encoding="utf-8"))["weight_map"]
        except (ValueError, KeyError) as exc:
            raise FormatError(f"{index}: unreadable index ({exc})") from exc
        files = sorted(set(weight_map.values()))
    else:
        files = sorted(f for f in os.listdir(src_dir) if f.endswith(".safetensors"))
    if not files:
        raise FormatError(f"{src_dir}: no .safetensors files found")
    paths = [os.path.join(src_dir, f) for f in files]
    for p in paths:
        if not os.path.exists(p):
            raise FormatError(f"{p}: shard listed in model.safetensors.index.json is missing")
    return paths


def _parse_header(path):
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise FormatError(f"{path}: truncated safetensors file ({size} bytes)")
        n = int.from_bytes(head, "little")
        if n > min(size - 8, 100 << 20):
            raise FormatError(f"{path}: safetensors header length {n} exceeds the file ({size} bytes)")
        try:
            header = json.loads(fh.read(n))
        except ValueError as exc:
            raise FormatError(f"{path}: damaged safetensors header ({exc})") from exc
    base = 8 + n
    refs = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if base + end > size or begin > end:
            raise FormatError(f"{path}: tensor {name!r} data [{begin},{end}) lies past the end of the "
                              f"file (truncated?)")
        item = _ITEM.get(info["dtype"])
        if item is not None and int(np.prod(shape, dtype=np.int64)) * item != end - begin:
            raise FormatError(f"{path}: tensor {name!r} shape {list(shape)} does not match its byte size")
        refs.append(TensorRef(name, path, info["dtype"], shape, base + begin, end - begin))
    return refs
