"""KVCache: paged key/value memory of every layer, in fixed-size blocks under a byte budget.

Role in the data flow: the decoder asks reserve(seq, n) before a forward step (a clear
KVCacheFull when blocks or the model's length run out), passes each layer's pools and the
sequences' block tables to the native attention, commit(seq, tokens) after it, and release(seq)
returns the blocks. Pools are numpy arrays [n_blocks, n_kv_heads, block_size, row] per layer,
float32 or 16-bit words (opt-in f16/bf16 cache); block b of a sequence holds its positions
b*block_size ... A block id means the same slot in every layer's pools, so one table serves all
layers. Blocks are reference-counted: with prefix caching (prefix_cache.py) a full block is named
by the hash chain of its tokens when committed, a new sequence starts with the cached full blocks
of its prompt (match_prefix), and an unreferenced named block is only evicted when no free block
is left. Shared blocks are never written: a sequence writes only past its matched prefix, which
always ends on a block boundary.
"""
import numpy as np

from ..encodings import BY_NAME, KV_CACHE_DTYPES
from ..errors import InvalidArgument, ResourceError
from .prefix_cache import PrefixIndex, block_digest

# name -> (numpy dtype of the pools, bytes per element): f32 as float32, the 16-bit kinds as uint16 words
DTYPES = {name: (np.float32 if BY_NAME[name].bits == 32 else np.uint16, BY_NAME[name].bits // 8)
          for name in KV_CACHE_DTYPES}


class KVCacheFull(ResourceError):
    """Not enough free KV blocks, or the sequence would pass the model's maximum length (a resource ran out,
    not a bad argument: the same request fits a bigger cache, or later)."""


class Sequence:
    __slots__ = ("id", "blocks", "length", "tokens", "hashes", "epoch")

    def __init__(self, sid, epoch=0):
        self.id, self.blocks, self.length = sid, [], 0
        self.tokens, self.hashes, self.epoch = [], [], epoch     # token ids committed; digests of full blocks

    def table(self):
        return np.asarray(self.blocks, dtype=np.int32)


def block_bytes(n_layers, n_kv_heads, k_row, v_row, block_size, dtype="f32", separate_v=True):
    if dtype not in DTYPES:
        raise InvalidArgument(f"kv cache dtype {dtype!r} unknown; expected one of {sorted(DTYPES)}",
                              parameter="kv_cache_dtype", value=dtype)
    return n_layers * n_kv_heads * block_size * (k_row + (v_row if separate_v else 0)) * DTYPES[dtype][1]


class KVCache:
    def __init__(self, n_layers, n_kv_heads, k_row, v_row, budget_bytes, max_seq_len, block_size=16,
                 dtype="f32", separate_v=True, prefix_caching=True, salt=None):
        per_block = block_bytes(n_layers, n_kv_heads, k_row, v_row, block_size, dtype, separate_v)
        np_dtype = DTYPES[dtype][0]
        self.n_blocks = int(budget_bytes // per_block)
        if self.n_blocks < 1:
            raise InvalidArgument(f"kv_cache_bytes={budget_bytes:,} holds no {block_size}-position block "
                                  f"({per_block:,} bytes per block over {n_layers} layers)",
                                  parameter="kv_cache_bytes", value=budget_bytes)
        self.dtype, self.block_size = dtype, block_size
        self.max_seq_len = min(int(max_seq_len), self.n_blocks * block_size)   # what one sequence can ever hold
        self.block_bytes = per_block
        self.k = [np.zeros((self.n_blocks, n_kv_heads, block_size, k_row), np_dtype) for _ in range(n_layers)]
        self.v = [np.zeros((self.n_blocks, n_kv_heads, block_size, v_row), np_dtype) for _ in range(n_layers)] \
            if separate_v else self.k
        self._free = list(range(self.n_blocks - 1, -1, -1))   # pop() hands out the lowest id first
        self._refs = [0] * self.n_blocks
        self._next_id = 0
        self.peak_blocks = 0
        self.prefix = PrefixIndex(salt) if prefix_caching else None
        self.epoch = 0

    # -- accounting -----------------------------------------------------------
    def free_blocks(self):
        """Blocks a reservation can take: never used or released, plus cached blocks nobody references."""
        return len(self._free) + (len(self.prefix.lru) if self.prefix is not None else 0)

    def used_blocks(self):
        return self.n_blocks - self.free_blocks()

    def blocks_needed(self, seq, n_new):
        if seq is None:
            return -(-n_new // self.block_size)
        need = -(-(seq.length + n_new) // self.block_size) - len(seq.blocks)
        return need if need > 0 else 0

    def new_sequence(self):
        seq = Sequence(self._next_id, self.epoch)
        self._next_id += 1
        return seq

    def reserve(self, seq, n_new):
        """Make room for n_new more positions of seq (KVCacheFull and nothing changed if impossible)."""
        if seq.length + n_new > self.max_seq_len:
            raise KVCacheFull(f"sequence of {seq.length + n_new} tokens exceeds max_seq_len={self.max_seq_len}")
        need = self.blocks_needed(seq, n_new)
        if not need:
            return
        free = self.free_blocks()
        if need > free:
            raise KVCacheFull(f"KV cache full: {need} more blocks needed, {free} of {self.n_blocks} "
                              f"free (kv_cache_bytes holds {self.n_blocks * self.block_size} positions)")
        for _ in range(need):
            b = self._free.pop() if self._free else self.prefix.evict()
            self._refs[b] = 1
            seq.blocks.append(b)
        self.peak_blocks = max(self.peak_blocks, self.n_blocks - free + need)

    def reserve_all(self, seqs, counts):
        """reserve(seqs[i], counts[i]) for every step of a forward call, all or nothing: KVCacheFull naming the
        step (nothing reserved) when a sequence would pass max_seq_len or the blocks of all do not fit."""
        need, bs = 0, self.block_size
        for i, (seq, n) in enumerate(zip(seqs, counts)):
            if seq.length + n > self.max_seq_len:
                raise KVCacheFull(f"step {i}: sequence {seq.id} would hold {seq.length + n} tokens, "
                                  f"more than max_seq_len={self.max_seq_len}")
            more = -(-(seq.length + n) // bs) - len(seq.blocks)
            need += more if more > 0 else 0
        if need:
            free = self.free_blocks()
            if need > free:
                raise KVCacheFull(f"KV cache full: the step needs {need} more blocks, {free} of "
                                  f"{self.n_blocks} are free")
            for seq, n in zip(seqs, counts):
                self.reserve(seq, n)

    def commit(self, seq, tokens):
        """The positions of `tokens` (a list of Python ints, just reserved and computed) now hold their keys
        and values."""
        seq.length += len(tokens)
        seq.tokens += tokens
        if self.prefix is None or seq.epoch != self.epoch:
            return
        bs = self.block_size
        while len(seq.hashes) < seq.length // bs:
            i = len(seq.hashes)
            parent = seq.hashes[-1] if seq.hashes else self.prefix.root
            block_tokens = seq.tokens[i * bs:(i + 1) * bs]
            digest, hit = self.prefix.lookup(parent, block_tokens)
            if hit is None:
                self.prefix.add(seq.blocks[i], digest, parent, block_tokens)
            seq.hashes.append(digest)

    def release(self, seq):
        for b in reversed(seq.blocks):
            self._refs[b] -= 1
            if self._refs[b] == 0:
                if self.prefix is not None and self.prefix.cached(b):
                    self.prefix.park(b)
                else:
                    self._free.append(b)
        seq.blocks, seq.length, seq.tokens, seq.hashes = [], 0, [], []

    def fork(self, seq):
        """A new sequence holding seq's positions: its full blocks shared (reference-counted, never
        written again), its partial last block copied into a fresh block of every layer's pools (the
        copy's same bits). For SamplingParams.n: the samples of one prompt compute it once.
        KVCacheFull (nothing changed) when the copy has no free block."""
        partial = seq.length % self.block_size
        if partial and not self.free_blocks():
            raise KVCacheFull(f"KV cache full: forking sequence {seq.id} needs 1 free block, none is free")
        child = Sequence(self._next_id, seq.epoch)
        self._next_id += 1
        full = seq.length // self.block_size
        for b in seq.blocks[:full]:
            self._refs[b] += 1
        child.blocks = list(seq.blocks[:full])
        if partial:
            b = self._free.pop() if self._free else self.prefix.evict()
            self._refs[b] = 1
            src = seq.blocks[full]
            for pool in self.k + ([] if self.v is self.k else self.v):
                pool[b] = pool[src]
            child.blocks.append(b)
        child.length, child.tokens, child.hashes = seq.length, list(seq.tokens), list(seq.hashes)
        self.peak_blocks = max(self.peak_blocks, self.used_blocks())
        return child

    # -- prefix caching ---------------------------------------------------------
    def prefix_digests(self, token_ids):
        """The chain digests of the full blocks match_prefix would look up for token_ids (the block of
        the last token excluded); [] when prefix caching is off."""
        if self.prefix is None:
            return []
        bs, parent, out = self.block_size, self.prefix.root, []
        for i in range((len(token_ids) - 1) // bs):
            parent = block_digest(parent, [int(t) for t in token_ids[i * bs:(i + 1) * bs]])
            out.append(parent)
        return out

    def match_prefix(self, seq, token_ids):
        """Give the empty seq the cached full blocks its tokens start with; returns the tokens covered.
        The block holding the last token is never matched, so its logits are always computed."""
        if seq.length or seq.blocks:
            raise InvalidArgument(f"match_prefix: sequence {seq.id} already holds {seq.length} tokens")
        if self.prefix is None:
            return 0
        bs, parent, n = self.block_size, self.prefix.root, (len(token_ids) - 1) // self.block_size
        self.prefix.queried_tokens += len(token_ids)
        for i in range(n):
            block_tokens = [int(t) for t in token_ids[i * bs:(i + 1) * bs]]
            digest, b = self.prefix.lookup(parent, block_tokens)
            if b is None:
                break
            if self._refs[b] == 0:
                self.prefix.unpark(b)
            self._refs[b] += 1
            seq.blocks.append(b)
            seq.hashes.append(digest)
            seq.tokens.extend(block_tokens)
            seq.length += bs
            parent = digest
        self.prefix.hit_tokens += seq.length
        self.peak_blocks = max(self.peak_blocks, self.used_blocks())
        return seq.length

    def set_salt(self, salt):
        """What the KV bits depend on besides the tokens changed (e.g. the expert set): forget every
        cached block; sequences already running keep theirs but name no further blocks."""
        if self.prefix is None or salt == self.prefix.salt:
            return
        self._free.extend(self.prefix.reset(salt))
        self.epoch += 1

    def reset_prefix_cache(self):
        """Forget every cached block (vLLM's LLM.reset_prefix_cache)."""
        if self.prefix is not None:
            salt = self.prefix.salt
            self._free.extend(self.prefix.reset(salt))
            self.epoch += 1

    def nbytes(self):
        pools = self.k + ([] if self.v is self.k else self.v)
        return sum(p.nbytes for p in pools)
