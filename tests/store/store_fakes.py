"""A small stand-in for format.reader.Model: random blobs in a file, same methods.

The store moves opaque blobs, so its cache logic is tested against this fake
(fast, no native code); the engine tests use real converted models.
"""
import os
import types
import zlib

import numpy as np

from colibri_dist.errors import FormatError
from colibri_dist.format.layout import ExpertLayout, MatrixLayout

ALIGN = 4096


def fake_layout(nbytes):
    m = MatrixLayout(dtype=0, rows=1, cols=1, data_offset=0, data_bytes=4)
    return ExpertLayout(gate=m, up=m, down=m, nbytes=nbytes, scheme="f32")


class FakeModel:
    def __init__(self, path, n_layers=2, n_experts=8, nbytes=5 * 4096 + 640, seed=0):
        self.path = os.fspath(path)
        self.moe_layers = list(range(n_layers))
        self.config = types.SimpleNamespace(n_experts=n_experts, scheme="f32")
        self.nbytes = nbytes
        rng = np.random.default_rng(seed)
        self.blobs = {(l, e): rng.integers(0, 256, nbytes, dtype=np.uint8)
                      for l in self.moe_layers for e in range(n_experts)}
        self.slot = (nbytes + ALIGN - 1) // ALIGN * ALIGN
        self.offsets = {}
        with open(self.path, "wb") as f:
            for i, key in enumerate(sorted(self.blobs)):
                self.offsets[key] = i * self.slot
                f.seek(i * self.slot)
                f.write(self.blobs[key].tobytes())
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        self.reads = 0

    def expert_layout(self, layer, expert=0):
        return fake_layout(self.nbytes)

    def expert_location(self, layer, e):
        return self.offsets[(layer, e)], self.nbytes, zlib.crc32(self.blobs[(layer, e)]) & 0xFFFFFFFF

    def expert_blob(self, layer, e):
        off = self.offsets[(layer, e)]
        return self._map[off:off + self.nbytes]

    def read_expert(self, layer, e):
        self.reads += 1
        out = np.array(self.expert_blob(layer, e))
        if zlib.crc32(out) & 0xFFFFFFFF != self.expert_location(layer, e)[2]:
            raise FormatError(f"{self.path}: layer {layer} expert {e} is damaged (checksum mismatch)")
        return out

    def close(self):
        self._map = None
