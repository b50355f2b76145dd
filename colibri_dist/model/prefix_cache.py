"""PrefixIndex: automatic prefix caching (vLLM's APC) — full KV blocks found again by their tokens.

Role in the data flow: the KVCache owns the blocks and their reference counts; this index names
the FULL blocks whose keys and values are known: key = a hash chain, digest(parent digest, the
block's token ids), rooted in a salt that names everything else the KV bits depend on (the
container, the expert set version: a hot-add or removal changes the salt, and every cached block
is forgotten). A request's prompt is matched block by block from the start; each entry also keeps
its parent digest and its tokens and both are compared, so a hash collision is a miss, never a
wrong block. Unreferenced cached blocks wait in an LRU and are evicted (forgotten, handed out
again) only when the free list is empty, so caching never costs a request a block.
"""
import hashlib
from collections import OrderedDict

import numpy as np


def block_digest(parent, tokens):
    """16-byte digest of (parent digest, the block's token ids as int64)."""
    return hashlib.blake2b(parent + np.asarray(tokens, dtype=np.int64).tobytes(), digest_size=16).digest()


def root_digest(salt):
    return hashlib.blake2b(repr(salt).encode(), digest_size=16, person=b"colibri-kv-root").digest()


class PrefixIndex:
    def __init__(self, salt=None):
        self.root = root_digest(salt)
        self.salt = salt
        self.by_digest = {}            # digest -> block id
        self.entry = {}                # block id -> (digest, parent digest, tokens tuple)
        self.lru = OrderedDict()       # cached blocks nobody references, oldest first
        self.queried_tokens = self.hit_tokens = self.evictions = 0

    def lookup(self, parent, tokens):
        """The cached block holding exactly `tokens` after the chain `parent`, or None."""
        digest = block_digest(parent, tokens)
        b = self.by_digest.get(digest)
        if b is None:
            return digest, None
        _, p, t = self.entry[b]
        return digest, (b if p == parent and t == tuple(tokens) else None)

    def add(self, block, digest, parent, tokens):
        """Name `block` by digest unless another block already holds that chain (then it stays anonymous)."""
        if digest in self.by_digest or block in self.entry:
            return False
        self.by_digest[digest] = block
        self.entry[block] = (digest, parent, tuple(tokens))
        return True

    def cached(self, block):
        return block in self.entry

    def park(self, block):
        """block's last reference is gone: keep it (most recently used) for a later prefix."""
        self.lru[block] = None

    def unpark(self, block):
        self.lru.pop(block, None)

    def evict(self):
        """Forget the least recently used unreferenced block; returns its id (None when there is none)."""
        if not self.lru:
            return None
        block, _ = self.lru.popitem(last=False)
        self.forget(block)
        self.evictions += 1
        return block

    def forget(self, block):
        digest, _, _ = self.entry.pop(block)
        del self.by_digest[digest]

    def reset(self, salt):
        """A new salt (the KV bits changed meaning): forget every block; returns the unreferenced ones."""
        free = list(self.lru)
        self.lru.clear()
        self.by_digest.clear()
        self.entry.clear()
        self.salt, self.root = salt, root_digest(salt)
        return free

    def stats(self):
        q, h = self.queried_tokens, self.hit_tokens
        return {"queried_tokens": q, "hit_tokens": h, "hit_rate": (h / q) if q else None,
                "cached_blocks": len(self.entry), "evictable_blocks": len(self.lru), "evictions": self.evictions}
