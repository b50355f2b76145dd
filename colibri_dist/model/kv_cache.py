"""KVCache: paged key/value memory of every layer, in fixed-size blocks under a byte budget.

Role in the data flow: the decoder asks reserve(seq, n) before a forward step (a clear
KVCacheFull when blocks or the model's length run out), passes each layer's pools and the
sequences' block tables to the native attention, and release(seq) returns the blocks.
Pools are numpy arrays [n_blocks, n_kv_heads, block_size, row] per layer, float32 or 16-bit
words (opt-in f16/bf16 cache); block b of a sequence holds its positions b*block_size ...
A block id means the same slot in every layer's pools, so one table serves all layers.
"""
import numpy as np

from ..errors import InvalidArgument

DTYPES = {"f32": (np.float32, 4), "f16": (np.uint16, 2), "bf16": (np.uint16, 2)}


class KVCacheFull(InvalidArgument):
    """Not enough free KV blocks, or the sequence would pass the model's maximum length."""


class Sequence:
    __slots__ = ("id", "blocks", "length")

    def __init__(self, sid):
        self.id, self.blocks, self.length = sid, [], 0

    def table(self):
        return np.asarray(self.blocks, dtype=np.int32)


class KVCache:
    def __init__(self, n_layers, n_kv_heads, k_row, v_row, budget_bytes, max_seq_len, block_size=16,
                 dtype="f32", separate_v=True):
        if dtype not in DTYPES:
            raise InvalidArgument(f"kv cache dtype {dtype!r} unknown; expected one of {sorted(DTYPES)}")
        np_dtype, size = DTYPES[dtype]
        per_block = n_layers * n_kv_heads * block_size * (k_row + (v_row if separate_v else 0)) * size
        self.n_blocks = int(budget_bytes // per_block)
        if self.n_blocks < 1:
            raise InvalidArgument(f"kv_cache_bytes={budget_bytes:,} holds no {block_size}-position block "
                                  f"({per_block:,} bytes per block over {n_layers} layers)")
        self.dtype, self.block_size = dtype, block_size
        self.max_seq_len = min(int(max_seq_len), self.n_blocks * block_size)   # what one sequence can ever hold
        self.block_bytes = per_block
        self.k = [np.zeros((self.n_blocks, n_kv_heads, block_size, k_row), np_dtype) for _ in range(n_layers)]
        self.v = [np.zeros((self.n_blocks, n_kv_heads, block_size, v_row), np_dtype) for _ in range(n_layers)] \
            if separate_v else self.k
        self._free = list(range(self.n_blocks - 1, -1, -1))   # pop() hands out the lowest id first
        self._next_id = 0
        self.peak_blocks = 0

    # -- accounting -----------------------------------------------------------
    def free_blocks(self):
        return len(self._free)

    def used_blocks(self):
        return self.n_blocks - len(self._free)

    def blocks_needed(self, seq, n_new):
        length = seq.length if seq is not None else 0
        have = len(seq.blocks) if seq is not None else 0
        return max(0, -(-(length + n_new) // self.block_size) - have)

    def new_sequence(self):
        seq = Sequence(self._next_id)
        self._next_id += 1
        return seq

    def reserve(self, seq, n_new):
        """Make room for n_new more positions of seq (KVCacheFull and nothing changed if impossible)."""
        if seq.length + n_new > self.max_seq_len:
            raise KVCacheFull(f"sequence of {seq.length + n_new} tokens exceeds max_seq_len={self.max_seq_len}")
        need = self.blocks_needed(seq, n_new)
        if need > len(self._free):
            raise KVCacheFull(f"KV cache full: {need} more blocks needed, {len(self._free)} of {self.n_blocks} free "
                              f"(kv_cache_bytes holds {self.n_blocks * self.block_size} positions)")
        for _ in range(need):
            seq.blocks.append(self._free.pop())
        self.peak_blocks = max(self.peak_blocks, self.used_blocks())

    def commit(self, seq, n_new):
        seq.length += n_new

    def release(self, seq):
        self._free.extend(reversed(seq.blocks))
        seq.blocks, seq.length = [], 0

    def nbytes(self):
        pools = self.k + ([] if self.v is self.k else self.v)
        return sum(p.nbytes for p in pools)
