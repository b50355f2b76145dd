"""MoeExecutor: the in-process MoE executor = .colibri model + ExpertStore + native kernels.

Role in the data flow: route(layer, x) and moe_forward(layer, x) for callers in
one process (no Ray); expert_forward/shared_forward are what pool workers run.

moe_forward takes one of three paths with the same bits (docs/ARCHITECTURE.md):
  - cache_bytes=None (every expert a zero-copy mmap view): native
    Runtime.moe_forward over the views (fused route+group+run+combine);
  - a RAM budget that holds the batch's expert union: get them all, the same
    fused call over the held views, release;
  - a smaller budget: route, then per expert in ascending id: store.get ->
    expert_forward on its rows -> slot_out[t, j] -> release; shared_forward;
    native.combine.
Either way each (token, slot) output comes from cb_expert_forward, so results do
not depend on the cache budget, the tier or the policy.

w8a8=True (the default): int8, int4 and int6 matrices multiply per-token int8 activations (w8a8 / w4a8 / w6a8,
docs/KERNELS.md), and k-quant ones (q4_k / q5_k / q6_k, e.g. an imported Q4_K_M) llama.cpp's Q8_K activations as
llama.cpp does; w8a8=False is the exact-weights mode (f32 activations on the decoded weights).

Lookahead prefetch: while layer l runs, the next MoE layer's gate is applied to
l's input and the predicted experts are prefetched; stats()["lookahead"] reports
how many of the experts the next layer really used had been predicted (recall).
"""
import contextlib

import numpy as np

from .errors import FormatError, InvalidArgument, NativeError
from .format.gating_spec import GatingSpec
from .routing.heat import ExpertHeat
from .store import ExpertStore, Segments
from .store.routing_table import build_table


class MoeExecutor:
    def __init__(self, path, threads=None, cache_bytes=None, offload_dir=None, policy="lru", cpus=None,
                 compression=None, lookahead=True, prefetch_workers=2, source_delay_s=0.0,
                 numa_policy=None, numa_nodes=None, w8a8=True, checksums=True):
        from . import native
        from .format.reader import open_model
        self._native = native
        self.path = str(path)
        try:
            self.model = open_model(path, checksums=checksums)   # False: skip first-use checks of views
        except OSError as exc:          # e.g. a directory: the reader lets the OS error through
            raise FormatError(f"{path}: cannot open the .colibri container ({exc})") from exc
        self.store = None
        try:
            self.config = self.model.config
            self.segments = Segments(path)
            self.store = ExpertStore(self.model, cache_bytes=cache_bytes, offload_dir=offload_dir,
                                     policy=policy, compression=compression, prefetch_workers=prefetch_workers,
                                     source_delay_s=source_delay_s, segments=self.segments,
                                     numa_policy=numa_policy, numa_nodes=numa_nodes)
            self.runtime = native.Runtime(threads=threads, cpus=cpus, w8a8=w8a8)
        except BaseException:
            if self.store is not None:
                self.store.close()
            self.model.close()
            raise
        self.lookahead = bool(lookahead)
        self.heat = ExpertHeat()            # tokens routed to each expert, per layer, once on (jobs' heat maps)
        self._tables = {}
        self._mapped = {}          # layer -> (version, [views]) for the fused path
        self._shared = {}
        self._predicted = {}       # layer -> set of experts predicted by lookahead
        self._recall = {"predicted": 0, "actual": 0, "hit": 0, "layers": 0}
        self._closed = False

    # ---- argument checks
    def _check_layer(self, layer):
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or layer not in self.model.moe_layers:
            raise InvalidArgument(f"layer {layer!r} is not an MoE layer of {self.path} "
                                  f"(MoE layers: {list(self.model.moe_layers)})")
        return int(layer)

    def _check_x(self, layer, x):
        if self._closed:
            raise InvalidArgument("engine is closed")
        if not isinstance(x, np.ndarray):
            raise InvalidArgument(f"layer {layer}: x must be a numpy array, got {type(x).__name__}")
        if x.dtype != np.float32:
            raise InvalidArgument(f"layer {layer}: x must be float32, got {x.dtype}")
        if x.ndim != 2 or x.shape[1] != self.config.hidden:
            raise InvalidArgument(f"layer {layer}: x must have shape [n, {self.config.hidden}], got {x.shape}")
        if not np.isfinite(x).all():
            raise InvalidArgument(f"layer {layer}: x contains NaN or Inf (non-finite input is rejected)")
        return np.ascontiguousarray(x)

    # ---- routing
    def table(self, layer):
        """RoutingTable of a layer (rebuilt when hot-added/removed experts change)."""
        tbl = self._tables.get(layer)
        if tbl is None or tbl.version != self.segments.version:
            tbl = self._tables[layer] = build_table(self.model, self.segments, layer, GatingSpec)
        return tbl

    def _route(self, layer, x):
        tbl = self.table(layer)
        idx, w = self.runtime.route(x, tbl.router, tbl.gating, bias=tbl.bias)
        return (idx if tbl.identity else tbl.ids[idx]), w

    def route(self, layer, x):
        """(idx int32 [n, k], w float32 [n, k]) with the family's exact gating."""
        layer = self._check_layer(layer)
        with self._naming(layer):
            return self._route(layer, self._check_x(layer, x))

    # ---- forward
    def moe_forward(self, layer, x):
        """float32 [n, hidden]: routed experts + shared expert, combined in slot order."""
        layer = self._check_layer(layer)
        x = self._check_x(layer, x)
        with self._naming(layer):
            if self.store.cache_bytes is None:
                y, idx = self._moe_mapped(layer, x)
            else:
                y, idx = self._moe_streamed(layer, x)
        self._check_finite(layer, y)
        self.model.check_unchanged()        # an in-place edit during or before this call: refuse
        self._score_lookahead(layer, idx)
        if self.heat.on:
            self.heat.add(layer, idx)
        return y

    def list_experts(self):
        """{layer: routable expert ids now (base + hot-added - removed)}, as Pool.list_experts answers."""
        return {int(layer): [int(e) for e in self.table(layer).ids] for layer in self.model.moe_layers}

    def count_heat(self):
        """From now on count the tokens routed to each expert (self.heat), on every MoE path."""
        self.heat.on = True

    def count_routed(self, layer, idx):
        """The fused decoder layer's routing (table slots, as mapped_moe's MoeLayer returns them) into heat."""
        tbl = self.table(layer)
        self.heat.add(layer, idx if tbl.identity else tbl.ids[idx])

    @contextlib.contextmanager
    def _naming(self, layer):
        """Kernel errors (e.g. router logits overflowing on this input) name the file and layer."""
        try:
            yield
        except NativeError as exc:
            if exc.message.startswith(self.path):
                raise
            raise NativeError(f"{self.path}: layer {layer}: {exc.message}", exc.code) from exc

    def _check_finite(self, layer, *arrays):
        """Finite weights can still overflow float32 on a given input: the same error on every path."""
        if not all(np.isfinite(a).all() for a in arrays if a is not None):
            raise NativeError(f"{self.path}: layer {layer}: non-finite MoE output (the expert weights "
                              f"overflow float32 on this input)", code=7)

    def mapped_moe(self, layer):
        """The layer's native.MoeLayer over zero-copy mmap views (cache_bytes None; rebuilt when hot-adds change
        the routing table), what the fused decoder layer runs; None when experts come through a RAM budget."""
        if self.store.cache_bytes is not None:
            return None
        tbl = self.table(layer)
        cached = self._mapped.get(layer)
        if cached is None or cached[0] != tbl.version:
            views = []
            for e in tbl.ids:
                with self.store.get(layer, int(e)) as h:
                    views.append(h.view)
            table = self._native.ExpertTable(views, len(views), self.config.hidden)
            shared, gate = self._shared_parts(layer)
            moe = self._native.MoeLayer(tbl.router, tbl.gating, table, self.config.hidden, bias=tbl.bias,
                                        shared=shared, shared_gate=gate)
            cached = self._mapped[layer] = (tbl.version, moe)
        return cached[1]

    def _moe_mapped(self, layer, x):
        tbl = self.table(layer)
        y, idx, _ = self.runtime.moe_layer_forward(x, self.mapped_moe(layer))
        return y, (idx if tbl.identity else tbl.ids[idx])

    def _moe_streamed(self, layer, x):
        idx, w = self._route(layer, x)
        n, k = idx.shape
        union = np.unique(idx)
        if len(union) * self.store.source.nbytes(layer, 0) <= self.store.cache_bytes:
            self._prefetch(layer, union)
            self._lookahead(layer, x)
            return self._moe_held(layer, x, union), idx
        # the budget is below this layer's own experts: no lookahead (it would evict them)
        slot_out = np.empty((n, k, self.config.hidden), dtype=np.float32)
        picks = [np.nonzero(idx == e) for e in union]
        outs = self._run_experts(layer, x, [(int(e), t.astype(np.int32)) for e, (t, _) in zip(union, picks)])
        for (tokens, slots), out in zip(picks, outs):
            slot_out[tokens, slots] = out
        shared = self.shared_forward(layer, x)
        self._check_finite(layer, slot_out, shared)
        y = self._native.combine(w, slot_out, shared)
        return y, idx

    def _moe_held(self, layer, x, union):
        """The batch's experts fit the budget: hold them all, run the fused layer
        (bit-identical to the per-expert pieces, the native contract)."""
        tbl = self.table(layer)
        compact = union if tbl.identity else np.searchsorted(tbl.ids, union)
        handles = []
        try:
            for e in union:
                handles.append(self.store.get(layer, int(e)))
            experts = {int(c): h.view for c, h in zip(compact, handles)}
            shared, gate = self._shared_parts(layer)
            y, _, _ = self.runtime.moe_forward(x, tbl.router, tbl.gating, experts, bias=tbl.bias,
                                               shared=shared, shared_gate=gate)
            return y
        finally:
            for h in handles:
                h.release()

    def expert_forward(self, layer, e, x, rows=None):
        """One expert on x (or on x[rows])."""
        return self.experts_forward(layer, x, [(e, rows)])[0]

    def experts_forward(self, layer, x, items):
        """Several experts on one layer batch: items [(e, rows or None)] -> outputs in that order.
        What pool workers call; x is checked once for the whole request."""
        layer = self._check_layer(layer)
        x = self._check_x(layer, x)
        return self._run_experts(layer, x, [(e, self._check_rows(layer, e, x, rows)) for e, rows in items])

    @staticmethod
    def _check_rows(layer, e, x, rows):
        if rows is None:
            return None
        rows = np.ascontiguousarray(rows, dtype=np.int32)
        if rows.ndim != 1 or (rows.size and (rows.min() < 0 or rows.max() >= x.shape[0])):
            raise InvalidArgument(f"layer {layer} expert {e}: rows must be 1-D indices into x "
                                  f"(0..{x.shape[0] - 1})")
        return rows

    def _run_experts(self, layer, x, items):
        """Run experts that are already in RAM first, prefetching the rest meanwhile: a cache
        smaller than the request then still hits on what the last request left resident,
        where a fixed order would evict each expert just before its next use. Each output
        is its own cb_expert_forward call, so the order never changes a bit."""
        resident = {e for (l, e) in self.store.resident() if l == layer}
        order = sorted(range(len(items)), key=lambda i: int(items[i][0]) not in resident)  # stable
        self._prefetch(layer, [int(items[i][0]) for i in order[1:]])  # order[0] is loaded on demand now
        outs = [None] * len(items)
        for i in order:
            e, rows = items[i]
            with self.store.get(layer, int(e)) as h:
                outs[i] = self.runtime.expert_forward(x, h.view, rows=rows)
        return outs

    def shared_forward(self, layer, x):
        """Shared expert (with its sigmoid gate if any) on x, or None if the layer has none."""
        layer = self._check_layer(layer)
        x = self._check_x(layer, x)
        shared, gate = self._shared_parts(layer)
        if shared is None:
            return None
        return self.runtime.shared_forward(x, shared, shared_gate=gate)

    def _shared_parts(self, layer):
        if layer not in self._shared:
            se = self.model.shared_expert(layer)
            view = None if se is None else self._native.expert_view(se[0], se[1])
            self._shared[layer] = (view, self.model.shared_gate(layer))
        return self._shared[layer]

    # ---- prefetch and lookahead
    def _fit(self, layer):
        """How many experts of a layer the prefetcher may hold (one slot left for demand loads)."""
        if self.store.cache_bytes is None:      # zero-copy mmap: nothing to load ahead
            return 0
        nbytes = self.store.source.nbytes(layer, 0)
        return max(0, self.store.cache_bytes // max(1, nbytes) - 1)

    def _prefetch(self, layer, experts):
        fit = self._fit(layer)
        if fit > 0:
            self.store.prefetch(layer, [int(e) for e in experts[:fit]])

    def _next_moe_layer(self, layer):
        layers = list(self.model.moe_layers)
        i = layers.index(layer)
        return layers[i + 1] if i + 1 < len(layers) else None

    def _lookahead(self, layer, x):
        nxt = self._next_moe_layer(layer)
        if not self.lookahead or nxt is None:
            return
        predicted = np.unique(self._route(nxt, x)[0])
        self._predicted[nxt] = set(int(e) for e in predicted)
        fit = self._fit(nxt) // 2          # leave room for the current layer's experts
        if fit > 0:
            self.store.prefetch(nxt, [int(e) for e in predicted[:fit]])

    def _score_lookahead(self, layer, idx):
        predicted = self._predicted.pop(layer, None)
        if predicted is None:
            return
        actual = set(int(e) for e in np.unique(idx))
        r = self._recall
        r["predicted"] += len(predicted)
        r["actual"] += len(actual)
        r["hit"] += len(actual & predicted)
        r["layers"] += 1

    # ---- hot-add
    def add_expert(self, layer, weights, router_row, bias=0.0):
        """Persist a new expert and make it routable at once; returns its id."""
        layer = self._check_layer(layer)
        g = self.config.gating
        if g.n_group > 1:
            raise InvalidArgument(f"layer {layer}: add_expert is not supported with group-limited gating "
                                  f"(n_group={g.n_group})")
        if bias and self.model.correction_bias(layer) is None:
            raise InvalidArgument(f"layer {layer}: bias is only used by models with a routing correction "
                                  f"bias; this model has none (got bias={bias!r})")
        return self.store.add_expert(layer, weights, router_row, bias)

    def remove_expert(self, layer, e):
        """Hide expert e of layer from routing (persisted; reversible only by editing the manifest)."""
        layer = self._check_layer(layer)
        g = self.config.gating
        if g.n_group > 1:
            raise InvalidArgument(f"layer {layer}: remove_expert is not supported with group-limited gating "
                                  f"(n_group={g.n_group})")
        visible = len(self.table(layer).ids) - (0 if int(e) in self.segments.removed(layer) else 1)
        if visible < g.top_k:
            raise InvalidArgument(f"layer {layer}: removing expert {e} would leave {visible} experts, "
                                  f"fewer than top_k={g.top_k}")
        self.store.remove_expert(layer, e)

    def refresh(self):
        """See experts another process added or removed."""
        self.store.refresh()

    # ---- stats and lifetime
    def stats(self):
        st = self.store.stats()
        r = self._recall
        st["lookahead"] = dict(r, recall=(r["hit"] / r["actual"]) if r["actual"] else None)
        st["threads"] = getattr(self.runtime, "threads", None)
        st["simd"] = self._native.simd_name()
        return st

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._mapped.clear()
        self._shared.clear()
        self.store.close()
        close = getattr(self.runtime, "close", None)
        if close is not None:
            close()
        self.model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
