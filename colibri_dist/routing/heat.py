"""ExpertHeat: tokens routed to each expert of each layer, counted where the routing happens.

Role in the data flow: the in-process MoeExecutor (its op-by-op MoE forward and the fused layer's routing) and
each pool ExpertClient add the expert ids they routed (`add(layer, idx)`) while `on` (jobs turn it on:
MoeExecutor.heat.on = True, Pool.count_heat()); jobs and reports read `report()` and `rows` after the fact. Counting never changes a routed id, a weight or a bit of output.
"""
import threading

import numpy as np


class ExpertHeat:
    def __init__(self):
        self.on = False               # counters check this before calling add: off costs no call per layer
        self._counts, self._rows, self._lock = {}, {}, threading.Lock()

    def add(self, layer, idx):
        """idx int [n, k]: the global expert ids n tokens were routed to in `layer`."""
        idx = np.asarray(idx)
        if not idx.size:
            return
        counts = np.bincount(idx.ravel())
        with self._lock:
            old = self._counts.get(layer)
            if old is None or len(old) < len(counts):          # first call, or experts hot-added
                grown = np.zeros(len(counts), np.int64)
                if old is not None:
                    grown[:len(old)] = old
                old = self._counts[layer] = grown
            old[:len(counts)] += counts
            self._rows[layer] = self._rows.get(layer, 0) + len(idx)

    @property
    def rows(self):
        """Token rows routed, summed over the layers (a token in 3 MoE layers counts 3: a pool worker's unit)."""
        with self._lock:
            return sum(self._rows.values())

    def report(self):
        """{"layer": [tokens routed to each expert]} (layer keys as strings, JSON-ready)."""
        with self._lock:
            return {str(layer): self._counts[layer].tolist() for layer in sorted(self._counts)}
