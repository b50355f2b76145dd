"""open_model(path): the lazy, zero-copy .colibri reader.

Role in the data flow: the engine and the expert store get everything from a
Model: config, router/bias/shared tensors as numpy views into one read-only
mmap, expert blobs either as mmap views (zero copy) or through read_expert
(exactly one pread into a fresh 64-byte aligned buffer). Opening validates the
header, the table and every entry's bounds (format/validate.py); tensor data is
checked (CRC-32 and finite weights/scales, format/integrity.py) before its first
use: a view once per process (remembered), a pread on every read, verify() all.
`checksums=False` skips the once-per-view check (for files verified already).
Because views are checked once, check_unchanged() (one fstat: size, mtime, inode) lets the
engine and decoder refuse a file edited in place while open, on every forward call.
"""
import mmap
import os
import stat

import numpy as np

from ..errors import FormatError, IntegrityError, InvalidArgument
from . import spec
from .layout import DTYPE_NAMES, SILU, ExpertLayout, MatrixLayout, scheme_of
from . import integrity
from .model_config import ModelConfig
from .quantize import bf16_bits_to_f32, dequantize
from .validate import check_agreement, check_entries, check_header, check_unique, describe, parse_meta

_NP_DTYPES = {0: np.float32, 1: np.float16, 2: np.uint16, 3: np.int8, 4: np.uint8,
              5: np.int16, 6: np.int32, 7: np.int64, 8: np.float64, 9: np.bool_}


def open_model(path, checksums=True):
    return Model(path, checksums=checksums)


class Model:
    def __init__(self, path, checksums=True):
        self.path = os.fspath(path)
        self.checksums = bool(checksums)
        self._checked = integrity.FirstUse()
        self._fd = None
        self._mm = None
        self._fd = open_regular(self.path)
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self):
        st = os.fstat(self._fd)
        self._identity = _identity(st)
        size = st.st_size
        header = spec.unpack_header(os.pread(self._fd, spec.HEADER_SIZE, 0)) \
            if size >= spec.HEADER_SIZE else None
        check_header(self.path, header, size)
        self._mm = mmap.mmap(self._fd, size, prot=mmap.PROT_READ)
        self._buf = np.frombuffer(self._mm, dtype=np.uint8)
        table = self._buf[header["table_offset"]:header["table_offset"] + header["table_count"] * spec.ENTRY_SIZE]
        if spec.crc32(table) != header["table_crc"]:
            raise FormatError(f"{self.path}: tensor table is damaged (checksum mismatch)")
        meta = self._buf[header["meta_offset"]:header["meta_offset"] + header["meta_bytes"]]
        if spec.crc32(meta) != header["meta_crc"]:
            raise FormatError(f"{self.path}: metadata block is damaged (checksum mismatch)")
        self.meta = parse_meta(self.path, bytes(meta))
        self.entries = [_unpack_entry(self.path, table, i) for i in range(header["table_count"])]
        self.header = header
        self.config = ModelConfig.from_header(header, extra=self.meta, where=self.path)
        check_unique(self.path, self.entries)
        self._by_name = {e.name: e for e in self.entries}
        self._by_slot = {(e.kind, e.layer, e.expert): e for e in self.entries
                         if e.kind not in spec.NAMED_KINDS}
        check_entries(self.path, self.config, self.entries, self._by_slot, header["table_offset"])
        check_agreement(self.path, self.config, self.meta, self.entries)

    # -- lifecycle ------------------------------------------------------------
    def close(self):
        self._buf = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # numpy views still alive; the mapping goes away with them
            self._mm = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        c = self.config
        return (f"<colibri Model {self.path!r} {c.family} {len(c.moe_layers)} MoE layers x "
                f"{c.n_experts} experts, {c.scheme}>")

    # -- lookups --------------------------------------------------------------
    @property
    def moe_layers(self):
        return list(self.config.moe_layers)

    def _slot(self, kind, layer, expert=-1, required=True):
        entry = self._by_slot.get((kind, layer, expert))
        if entry is None and required:
            if layer not in self.config.moe_layers:
                raise InvalidArgument(f"{self.path}: layer {layer} is not a MoE layer "
                                      f"(MoE layers: {list(self.config.moe_layers)})")
            raise InvalidArgument(f"{self.path}: layer {layer} has no expert {expert} "
                                  f"(experts 0..{self.config.n_experts - 1})")
        return entry

    def _view(self, entry):
        """Zero-copy view of an entry's data, checked before its first use in this process."""
        if self.checksums and not self._checked.seen(id(entry)):
            raw = self._buf[entry.offset:entry.offset + entry.nbytes]
            self._check(entry, raw)
            self._checked.mark(id(entry))
        dtype = _NP_DTYPES[entry.dtype]
        count = entry.nbytes // np.dtype(dtype).itemsize
        arr = np.frombuffer(self._mm, dtype=dtype, count=count, offset=entry.offset)
        return arr.reshape(entry.shape) if entry.kind not in spec.BLOB_KINDS else arr

    def _check(self, entry, raw):
        """IntegrityError (a FormatError) unless raw (the entry's bytes) has its CRC and finite values."""
        layout = entry.matrices[0] if entry.kind == spec.KIND_MATRIX else \
            _layout(entry, self.config.act) if entry.kind in spec.BLOB_KINDS else None
        problem = integrity.entry_problem(raw, entry, layout)
        if problem is not None:
            integrity.raise_problem(self.path, describe(entry), problem)

    def check_expert(self, layer, expert, blob):
        """Check a copy of an expert blob read elsewhere (the store's pread into recycled RAM)."""
        self._check(self._slot(spec.KIND_EXPERT, layer, expert), blob)

    def check_unchanged(self):
        """IntegrityError naming the file if it was written to (size, mtime or inode changed) since open:
        mapped bytes checked once would silently mix old and new contents."""
        if self._fd is None:
            return
        now = _identity(os.fstat(self._fd))
        if now != self._identity:
            was = dict(zip(_IDENTITY, self._identity))
            diff = ", ".join(f"{k} {was[k]} -> {v}" for k, v in zip(_IDENTITY, now) if was[k] != v)
            raise IntegrityError(f"{self.path}: the model file changed on disk while open ({diff}); it was "
                                 f"edited in place: reopen it (results would mix old and new bytes)")

    def integrity_stats(self):
        return {"checksums": self.checksums, "checked": self._checked.count()}

    def expert_layout(self, layer, expert=0):
        return _layout(self._slot(spec.KIND_EXPERT, layer, expert), self.config.act)

    def expert_blob(self, layer, expert):
        return self._view(self._slot(spec.KIND_EXPERT, layer, expert))

    def expert_location(self, layer, expert):
        e = self._slot(spec.KIND_EXPERT, layer, expert)
        return e.offset, e.nbytes, e.crc32

    def read_expert(self, layer, expert):
        """One pread of the blob into a fresh aligned buffer, checksum verified."""
        entry = self._slot(spec.KIND_EXPERT, layer, expert)
        return self._read_blob(entry, f"layer {layer} expert {expert}")

    def _read_blob(self, entry, what):
        out = aligned_empty(entry.nbytes)
        got = os.preadv(self._fd, [out], entry.offset)
        if got != entry.nbytes:
            raise FormatError(f"{self.path}: {what}: short read ({got} of {entry.nbytes} bytes)")
        self._check(entry, out)
        return out

    def router(self, layer):
        return self._view(self._slot(spec.KIND_ROUTER, layer))

    def correction_bias(self, layer):
        entry = self._slot(spec.KIND_BIAS, layer, required=False)
        return None if entry is None else self._view(entry)

    def shared_expert(self, layer):
        entry = self._slot(spec.KIND_SHARED, layer, required=False)
        return None if entry is None else (self._view(entry), _layout(entry))

    def shared_gate(self, layer):
        entry = self._slot(spec.KIND_SHARED_GATE, layer, required=False)
        return None if entry is None else self._view(entry)

    def tensor(self, name):
        """A stored tensor as a view (bfloat16 as raw uint16 words); an encoded matrix decoded to float32."""
        entry = self._entry(name)
        if entry.kind == spec.KIND_MATRIX:
            return dequantize(self._view(entry), entry.matrices[0])
        return self._view(entry)

    def tensor_f32(self, name):
        """A float tensor decoded to a float32 array (float16 / bfloat16 widened exactly)."""
        entry = self._entry(name)
        arr = self.tensor(name)
        if entry.kind == spec.KIND_TENSOR and entry.dtype == 2:
            return bf16_bits_to_f32(arr).reshape(entry.shape)
        if entry.kind == spec.KIND_TENSOR and entry.dtype not in (0, 1, 8):
            raise FormatError(f"{self.path}: tensor {name!r} is {spec.DTYPES[entry.dtype]}, not a float tensor")
        return np.ascontiguousarray(arr, dtype=np.float32)

    def has_tensor(self, name):
        return name in self._by_name

    def _entry(self, name):
        entry = self._by_name.get(name)
        if entry is None:
            raise InvalidArgument(f"{self.path}: no tensor named {name!r}")
        return entry

    def matrix(self, name):
        """(uint8 buffer, MatrixLayout) of a dense matrix for the kernels: an encoded matrix entry as
        stored, or (containers without them) a 2-D float32/float16/bfloat16 tensor as its raw bytes."""
        entry = self._entry(name)
        if entry.kind == spec.KIND_MATRIX:
            return self._view(entry), entry.matrices[0]
        code = {0: 0, 1: 1, 2: 2}.get(entry.dtype)
        if entry.kind != spec.KIND_TENSOR or code is None or len(entry.shape) != 2:
            raise FormatError(f"{self.path}: tensor {name!r} is {spec.DTYPES[entry.dtype]} {list(entry.shape)}, "
                              f"not a float matrix")
        self._view(entry)           # first-use check (CRC, finite values)
        raw = np.frombuffer(self._mm, dtype=np.uint8, count=entry.nbytes, offset=entry.offset)
        return raw, MatrixLayout(code, entry.shape[0], entry.shape[1], 0, entry.nbytes)

    def dense_mlp(self, layer):
        """(blob, ExpertLayout) of a non-MoE layer's SwiGLU MLP, or None when it is not stored as a blob."""
        entry = self._slot(spec.KIND_DENSE_MLP, layer, required=False)
        return None if entry is None else (self._view(entry), _layout(entry))

    @property
    def dense_scheme(self):
        """Encoding of dense matrices (meta; None for containers from before whole-model support)."""
        return self.meta.get("dense_scheme")

    @property
    def lm_head_scheme(self):
        """Encoding of lm_head.weight as stored (None when the container has no encoded lm_head)."""
        if not self.has_tensor("lm_head.weight"):
            return None
        entry = self._entry("lm_head.weight")
        return DTYPE_NAMES.get(entry.matrices[0].dtype) if entry.kind == spec.KIND_MATRIX else None

    def tokenizer_files(self):
        """{file name: text} of the tokenizer files copied from the checkpoint ({} when there are none)."""
        files = self.meta.get("tokenizer_files") or {}
        return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}

    def tensor_names(self):
        return [e.name for e in self.entries]

    def bytes_by_dtype(self):
        """{label: bytes}: plain tensors by storage dtype; blobs by kind and encoding ("expert:q4_k"; a blob whose
        matrices differ names each distinct one: "expert:q4_k+q6_k")."""
        totals = {}
        for e in self.entries:
            key = f"{_BLOB_LABEL.get(e.kind, 'expert')}:{_blob_encodings(e)}" \
                if e.kind in spec.BLOB_KINDS else spec.DTYPES[e.dtype]
            totals[key] = totals.get(key, 0) + e.nbytes
        return totals

    def matrix_encodings(self):
        """{"experts" | "dense" | "lm_head" | "embedding": {encoding: number of matrices}} over the table: the
        routed and shared experts' gate/up/down, the dense matrices and dense-MLP parts, the LM head, an encoded
        embedding. A part whose dict has two keys is mixed."""
        out = {"experts": {}, "dense": {}, "lm_head": {}, "embedding": {}}
        for e in self.entries:
            if e.kind not in spec.BLOB_KINDS:
                continue
            part = "experts" if e.kind in (spec.KIND_EXPERT, spec.KIND_SHARED) else \
                _NAMED_MATRICES.get(e.name, "dense")
            mats = e.matrices[:1] if e.kind == spec.KIND_MATRIX else e.matrices
            for m in mats:
                name = DTYPE_NAMES.get(m.dtype, str(m.dtype))
                out[part][name] = out[part].get(name, 0) + 1
        return out

    # -- integrity ------------------------------------------------------------
    def verify(self, progress=True):
        """Check every entry's CRC32 and finite values; FormatError listing every damaged one."""
        from .progress import bar
        damaged = []
        with bar(total=sum(e.nbytes for e in self.entries), desc="verify", unit="B",
                 enabled=progress) as pbar:
            for e in self.entries:
                layout = _layout(e) if e.kind in spec.BLOB_KINDS else None
                problem = integrity.entry_problem(self._buf[e.offset:e.offset + e.nbytes], e, layout)
                if problem is not None:
                    damaged.append(describe(e) if problem.startswith("damaged") else f"{describe(e)} ({problem})")
                pbar.update(e.nbytes)
        if damaged:
            raise FormatError(f"{self.path}: {len(damaged)} damaged: " + "; ".join(damaged))
        return True


_BLOB_LABEL = {spec.KIND_MATRIX: "matrix", spec.KIND_DENSE_MLP: "dense_mlp"}
_NAMED_MATRICES = {"lm_head.weight": "lm_head", "model.embed_tokens.weight": "embedding"}


def _blob_encodings(e):
    mats = e.matrices[:1] if e.kind == spec.KIND_MATRIX else e.matrices
    return "+".join(dict.fromkeys(DTYPE_NAMES.get(m.dtype, "?") for m in mats))
_IDENTITY = ("device", "inode", "size", "mtime_ns")


def _identity(st):
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
def open_regular(path):
    """fd of a regular file opened read-only without blocking (a FIFO never hangs us)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FormatError(f"{path}: cannot open: {exc.strerror or exc}") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise FormatError(f"{path}: cannot open: {what} (a .colibri container is a regular file)")
    os.set_blocking(fd, True)
    return fd


def _unpack_entry(path, table, i):
    try:
        return spec.Entry.unpack(bytes(table[i * spec.ENTRY_SIZE:(i + 1) * spec.ENTRY_SIZE]))
    except ValueError as exc:
        raise FormatError(f"{path}: tensor table entry {i} is invalid ({exc})") from exc


def _layout(entry, act=SILU):
    """The ExpertLayout of a blob entry; act: the header's expert activation (routed experts only)."""
    gate, up, down = entry.matrices
    return ExpertLayout(gate=gate, up=up, down=down, nbytes=entry.nbytes,
                        scheme=scheme_of(m.dtype for m in entry.matrices), biases=entry.biases,
                        act=act if entry.kind == spec.KIND_EXPERT else SILU)


def aligned_empty(nbytes, align=64):
    raw = np.empty(nbytes + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]
