"""A deterministic fake of the StepModel protocol for the generation tests.

Each position's logits come from a hash chain over the sequence's whole token history, so they
depend on that history alone (never on the batch); the fake allocates KV blocks like a paged cache
and asserts the scheduler respects the protocol (blocks checked first, positions < max_seq_len,
each sequence at most once per call).
"""
import hashlib

import numpy as np


class FakeSeq:
    def __init__(self, sid):
        self.sid, self.tokens, self.blocks, self.chain = sid, [], 0, b"root"


class FakeStepModel:
    def __init__(self, vocab_size=64, max_seq_len=256, block_size=4, num_blocks=10_000, eos_token_ids=(),
                 levels=None, eos_boost=0.0):
        self.vocab_size, self.max_seq_len, self.block_size = vocab_size, max_seq_len, block_size
        self.eos_token_ids = tuple(eos_token_ids)
        self.num_blocks, self.used = num_blocks, 0
        self.levels = levels          # quantize logits to this many steps per unit (creates exact ties)
        self.eos_boost = eos_boost
        self.calls, self.live, self._next = [], {}, 0

    def free_blocks(self):
        return self.num_blocks - self.used

    def blocks_needed(self, seq, n_new):
        have = 0 if seq is None else len(seq.tokens)
        held = 0 if seq is None else seq.blocks
        return max(0, -(-(have + n_new) // self.block_size) - held)

    def new_sequence(self):
        self._next += 1
        seq = FakeSeq(self._next)
        self.live[seq.sid] = seq
        return seq

    def release(self, seq):
        assert self.live.pop(seq.sid) is seq, "released twice"
        self.used -= seq.blocks
        seq.blocks = 0

    def logits_for(self, chain):
        seed = int.from_bytes(hashlib.blake2b(chain, digest_size=8).digest(), "little")
        x = np.random.default_rng(seed).standard_normal(self.vocab_size).astype(np.float32) * 3
        if self.levels:
            x = np.round(x * self.levels).astype(np.float32) / self.levels
        for e in self.eos_token_ids:
            x[e] += self.eos_boost
        return x

    def forward(self, steps):
        sids = [s.sid for s, _, _ in steps]
        assert len(set(sids)) == len(sids), "a sequence twice in one call"
        self.calls.append([(s.sid, len(t)) for s, t, _ in steps])
        out = []
        for seq, toks, want_all in steps:
            assert seq.sid in self.live and toks
            need = self.blocks_needed(seq, len(toks))
            assert need <= self.free_blocks(), "scheduler did not check blocks"
            seq.blocks += need
            self.used += need
            rows = []
            for t in toks:
                assert 0 <= t < self.vocab_size
                seq.chain = hashlib.blake2b(seq.chain + int(t).to_bytes(4, "little"), digest_size=16).digest()
                seq.tokens.append(t)
                rows.append(self.logits_for(seq.chain))
            assert len(seq.tokens) <= self.max_seq_len, "position past max_seq_len"
            out.append(np.stack(rows) if want_all else rows[-1][None, :])
        return out

    def reference_logits(self, tokens):
        """Logits after each prefix of tokens, computed outside any batch (for score tests)."""
        chain, rows = b"root", []
        for t in tokens:
            chain = hashlib.blake2b(chain + int(t).to_bytes(4, "little"), digest_size=16).digest()
            rows.append(self.logits_for(chain))
        return np.stack(rows)
