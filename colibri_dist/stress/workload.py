"""Job streams of the stress run: batches of tokens with skewed, shifting routing.

Role in the data flow: each `JobStream` produces `Batch`es (unique token ids and
one float32 input block per MoE layer). A token aimed at expert e is a scaled
copy of e's router row plus noise, so the exact gate sends it to e (or a close
neighbour) and the expert popularity follows a Zipf law over a permutation of
the live experts. Every `shift_every` batches the permutation is redrawn: the
hot set moves and the cache has to follow. Pure numpy, no store or Ray here.
"""
from dataclasses import dataclass

import numpy as np


@dataclass
class Batch:
    stream: int
    seq: int                  # batch number inside its stream
    token_ids: np.ndarray     # int64 [n], unique over the whole run
    inputs: dict              # layer -> float32 [n, hidden]
    targets: dict             # layer -> int64 [n] expert each token was aimed at


def zipf_probs(n, s):
    """Zipf popularity of ranks 1..n with exponent s (normalised)."""
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    return p / p.sum()


class JobStream:
    """One client's stream of batches. `table` is read at each batch for the live experts.

    table: callable () -> {layer: (expert_ids int array, router float32 [E_total, h])}
    """

    def __init__(self, stream, table, batch_tokens, zipf_s=1.1, shift_every=20,
                 noise=0.25, seed=0, max_streams=1024):
        self.stream = stream
        self.table = table
        self.batch_tokens = int(batch_tokens)
        self.zipf_s = float(zipf_s)
        self.shift_every = max(1, int(shift_every))
        self.noise = float(noise)
        self.rng = np.random.default_rng([seed, stream])
        self.seq = 0
        self._stride = max_streams
        self._perm = {}            # layer -> permutation of live experts (hot first)
        self._perm_epoch = -1

    def next_batch(self):
        table = self.table()
        epoch = self.seq // self.shift_every
        if epoch != self._perm_epoch:
            self._perm = {}
            self._perm_epoch = epoch
        n = self.batch_tokens
        first = self.seq * n
        ids = (np.arange(first, first + n, dtype=np.int64) * self._stride) + self.stream
        inputs, targets = {}, {}
        for layer, (live, router) in sorted(table.items()):
            perm = self._hot_order(layer, live)
            picks = perm[self.rng.choice(len(perm), size=n, p=zipf_probs(len(perm), self.zipf_s))]
            targets[layer] = picks.astype(np.int64)
            inputs[layer] = self._tokens_for(router, picks)
        batch = Batch(self.stream, self.seq, ids, inputs, targets)
        self.seq += 1
        return batch

    def _hot_order(self, layer, live):
        live = np.asarray(live, dtype=np.int64)
        perm = self._perm.get(layer)
        if perm is None or not np.array_equal(np.sort(perm), np.sort(live)):
            perm = self.rng.permutation(live)
            self._perm[layer] = perm
        return perm

    def _tokens_for(self, router, picks):
        rows = router[picks].astype(np.float64)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        rows = rows / np.maximum(norms, 1e-12) * np.sqrt(router.shape[1])
        rows += self.noise * self.rng.standard_normal(rows.shape)
        return np.ascontiguousarray(rows, dtype=np.float32)


def hot_set(batches, layer, top=4):
    """The `top` most targeted experts of `layer` over some batches (for reports and tests)."""
    counts = {}
    for batch in batches:
        for e in batch.targets[layer].tolist():
            counts[e] = counts.get(e, 0) + 1
    return [e for e, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]
