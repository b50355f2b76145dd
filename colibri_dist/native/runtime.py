"""Runtime: a cb_engine (thread pool + scratch arena) with numpy in/out and checked arguments.

Role: what the MoeExecutor and the pool workers call to route tokens, run experts,
run the shared expert and the fused MoE layer. One caller thread at a time
(a lock serialises calls); results are batch invariant, so splitting a batch
across calls, threads or processes never changes a bit.
"""
import threading

import numpy as np

from ..errors import InvalidArgument
from ._lib import check_status, ffi, lib, simd_name
from .gating import GatingSpec, to_c
from .model_ops import ModelOps
from .views import ExpertView


def _f32(name, a, ndim, shape=None):
    if not isinstance(a, np.ndarray):
        raise InvalidArgument(f"{name} must be a numpy float32 array, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise InvalidArgument(f"{name} must be float32, got {a.dtype}")
    if a.ndim != ndim:
        raise InvalidArgument(f"{name} must be {ndim}-D, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise InvalidArgument(f"{name} must be C-contiguous (use np.ascontiguousarray)")
    if shape is not None:
        for axis, (got, want) in enumerate(zip(a.shape, shape)):
            if want is not None and got != want:
                raise InvalidArgument(f"{name} has shape {a.shape}, expected {tuple('*' if s is None else s for s in shape)} "
                                      f"(axis {axis}: {got} != {want})")
    return a


def _finite(name, a):
    ok = np.isfinite(a)
    if not ok.all():
        bad = np.argwhere(~ok)[0]
        raise InvalidArgument(f"{name} contains NaN/Inf (first at index {tuple(int(i) for i in bad)}); "
                              f"inputs must be finite")


def _ptr(ctype, a):
    return ffi.cast(ctype, ffi.from_buffer(a)) if a is not None else ffi.NULL


def _view(name, v, hidden):
    if not isinstance(v, ExpertView):
        raise InvalidArgument(f"{name} must be an ExpertView (native.expert_view), got {type(v).__name__}")
    if v.hidden != hidden:
        raise InvalidArgument(f"{name} has hidden size {v.hidden}, input has {hidden}")
    return v


def combine(w, slot_out, shared=None):
    """y[t] = shared[t] + sum_j w[t,j] * slot_out[t,j] in slot order j (cb_combine)."""
    _f32("w", w, 2)
    n, k = w.shape
    _f32("slot_out", slot_out, 3, (n, k, None))
    h = slot_out.shape[2]
    if shared is not None:
        _f32("shared", shared, 2, (n, h))
    for name, a in (("w", w), ("slot_out", slot_out), ("shared", shared)):
        if a is not None:
            _finite(name, a)
    y = np.empty((n, h), dtype=np.float32)
    if n:
        check_status(lib.cb_combine(n, k, h, _ptr("float *", w), _ptr("float *", slot_out),
                                    _ptr("float *", shared), _ptr("float *", y)), "combine")
    return y


def _check_gating(gating):
    if not isinstance(gating, GatingSpec):
        raise InvalidArgument(f"gating must be a GatingSpec (format.gating_spec / native.Gating), got {type(gating).__name__}")


def gate_logits(logits, gating, bias=None):
    """Gating only, on given router logits float32 [n, E] -> (idx int32 [n,k], w float32 [n,k]) (single thread)."""
    _check_gating(gating)
    _f32("logits", logits, 2, (None, gating.n_experts))
    if bias is not None:
        _f32("bias", bias, 1, (gating.n_experts,))
    n = logits.shape[0]
    idx = np.empty((n, gating.top_k), dtype=np.int32)
    w = np.empty((n, gating.top_k), dtype=np.float32)
    check_status(lib.cb_gate_logits(to_c(gating), _ptr("float *", logits), _ptr("float *", bias), n,
                                    _ptr("int32_t *", idx), _ptr("float *", w)), "gate_logits")
    return idx, w


class Runtime(ModelOps):
    """Runtime(threads=None, cpus=None, w8a8=False): threads None = one per CPU in `cpus` or online CPU.

    Whole-model ops (matmul, matmul_many, matmul_heads, attention) come from model_ops.ModelOps.
    w8a8=True (opt-in): experts and dense matrices stored as per-row int8 ("int8") multiply
    per-token int8 activations with exact integer dots (w8a8), and int4 ones ("int4-g32",
    "int4-g64") and int6 ones ("int6-g64") take the same activations through the w4a8 / w6a8
    kernels (about 1.5x the f32 path's throughput for int8 at large batch, 2-4x for int4; slightly less accurate:
    docs/KERNELS.md); llama.cpp's k-quants ("q4_k", "q5_k", "q6_k") take llama.cpp's own Q8_K activations
    (per 256 inputs) and integer dots, the product llama.cpp computes for them. Still batch invariant and the
    same bits on every SIMD level.
    The worker threads do not survive fork(): create a Runtime in the process that uses it.
    """

    def __init__(self, threads=None, cpus=None, w8a8=False):
        if threads is not None and (int(threads) != threads or not 1 <= threads <= 1024):
            raise InvalidArgument(f"threads must be an integer in 1..1024, got {threads!r}")
        cpu_list = [int(c) for c in cpus] if cpus else []
        out = ffi.new("cb_engine **")
        cpus_c = ffi.new("int32_t[]", cpu_list) if cpu_list else ffi.NULL
        check_status(lib.cb_engine_create(int(threads or 0), cpus_c, len(cpu_list), out), "Runtime")
        self._e = out[0]
        self._lock = threading.Lock()
        self.w8a8 = bool(w8a8)
        check_status(lib.cb_engine_set_w8a8(self._e, int(self.w8a8)), "Runtime(w8a8)", self._e)

    # -- lifecycle -------------------------------------------------------
    def close(self):
        with self._lock:
            if self._e is not None:
                lib.cb_engine_destroy(self._e)
                self._e = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _engine(self):
        if self._e is None:
            raise InvalidArgument("Runtime is closed")
        return self._e

    @property
    def threads(self):
        return int(lib.cb_engine_threads(self._engine()))

    def stats(self):
        e = self._engine()
        return {"threads": int(lib.cb_engine_threads(e)), "simd": simd_name(),
                "arena_high_water": int(lib.cb_engine_arena_high_water(e)),
                "arena_mallocs": int(lib.cb_engine_mallocs(e)), "w8a8": self.w8a8}

    # -- routing ---------------------------------------------------------
    def _route_args(self, x, router, gating, bias):
        _check_gating(gating)
        _f32("x", x, 2)
        _f32("router", router, 2, (gating.n_experts, x.shape[1]))
        if bias is not None:
            _f32("bias", bias, 1, (gating.n_experts,))
            _finite("bias", bias)
        _finite("x", x)

    def route(self, x, router, gating, bias=None):
        """-> (idx int32 [n, k], w float32 [n, k]); slots in descending score order."""
        self._route_args(x, router, gating, bias)
        n, h = x.shape
        idx = np.empty((n, gating.top_k), dtype=np.int32)
        w = np.empty((n, gating.top_k), dtype=np.float32)
        with self._lock:
            e = self._engine()
            check_status(lib.cb_route(e, to_c(gating), _ptr("float *", router), _ptr("float *", bias),
                                      _ptr("float *", x), n, h, _ptr("int32_t *", idx), _ptr("float *", w)),
                         "route", e)
        return idx, w

    # -- experts ---------------------------------------------------------
    def expert_forward(self, x, view, rows=None):
        """out[i] = E(x[rows[i]]) (rows None: every row). -> float32 [len(rows) or n, h]."""
        _f32("x", x, 2)
        n, h = x.shape
        _view("expert", view, h)
        rows_c = ffi.NULL
        if rows is not None:
            rows = np.asarray(rows)
            if rows.ndim != 1 or rows.dtype.kind not in "iu":
                raise InvalidArgument(f"rows must be a 1-D integer array, got {rows.dtype} {rows.shape}")
            if rows.size and (rows.min() < 0 or rows.max() >= n):
                raise InvalidArgument(f"rows must lie in [0, {n}), got [{rows.min()}, {rows.max()}]")
            rows = np.ascontiguousarray(rows, dtype=np.int32)
            rows_c = _ptr("int32_t *", rows)
            _finite("x", x[rows])
        else:
            _finite("x", x)
        m = n if rows is None else rows.size
        out = np.empty((m, h), dtype=np.float32)
        if m:
            with self._lock:
                e = self._engine()
                check_status(lib.cb_expert_forward(e, view.c, _ptr("float *", x), h, rows_c, m, _ptr("float *", out)),
                             "expert_forward", e)
        return out

    def shared_forward(self, x, view, shared_gate=None):
        """sigmoid(shared_gate . x[t]) * S(x[t]) (gate None: S(x[t])). -> float32 [n, h]."""
        _f32("x", x, 2)
        n, h = x.shape
        _view("shared expert", view, h)
        if shared_gate is not None:
            _f32("shared_gate", shared_gate, 1, (h,))
            _finite("shared_gate", shared_gate)
        _finite("x", x)
        out = np.empty((n, h), dtype=np.float32)
        if n:
            with self._lock:
                e = self._engine()
                check_status(lib.cb_shared_forward(e, view.c, _ptr("float *", shared_gate), _ptr("float *", x), n, h,
                                                   _ptr("float *", out)), "shared_forward", e)
        return out

    # -- whole layer -----------------------------------------------------
    def moe_forward(self, x, router, gating, experts, bias=None, shared=None, shared_gate=None):
        """Route + experts + shared + combine. experts: an ExpertTable, or a sequence or mapping
        id -> ExpertView (None = absent).

        -> (y float32 [n, h], idx int32 [n, k], w float32 [n, k]).
        """
        _f32("x", x, 2)
        return self.moe_layer_forward(x, MoeLayer(router, gating, experts, x.shape[1], bias=bias, shared=shared,
                                                  shared_gate=shared_gate))

    def moe_layer_forward(self, x, layer):
        """moe_forward on a MoeLayer built beforehand (checked once) -> (y, idx, w)."""
        _f32("x", x, 2, (None, layer.c.hidden))
        _finite("x", x)
        n, h = x.shape
        gating = layer.c.gating
        y = np.empty((n, h), dtype=np.float32)
        idx = np.empty((n, gating.top_k), dtype=np.int32)
        w = np.empty((n, gating.top_k), dtype=np.float32)
        with self._lock:
            e = self._engine()
            check_status(lib.cb_moe_forward(e, layer.c, _ptr("float *", x), n, _ptr("float *", y),
                                            _ptr("int32_t *", idx), _ptr("float *", w)), "moe_forward", e)
        return y, idx, w


class MoeLayer:
    """A layer's cb_moe_layer (router, gating, expert table, shared expert and gate), checked once; `.c`
    holds what it points to alive. Runtime.moe_forward builds one per call, the fused decoder layer
    (layer_ops.py) once per expert-table version."""

    def __init__(self, router, gating, experts, hidden, bias=None, shared=None, shared_gate=None):
        _check_gating(gating)
        _f32("router", router, 2, (gating.n_experts, hidden))
        if bias is not None:
            _f32("bias", bias, 1, (gating.n_experts,))
            _finite("bias", bias)
        self.table = _expert_table(experts, gating.n_experts, hidden)       # holds the views alive
        self._keep = (router, bias, shared_gate)
        c = self.c = ffi.new("cb_moe_layer *")
        c.hidden, c.gating = hidden, to_c(gating)[0]
        c.router, c.bias, c.experts = _ptr("float *", router), _ptr("float *", bias), self.table.c
        if shared is not None:
            _view("shared expert", shared, hidden)
            c.n_shared, c.shared = 1, shared.c
        if shared_gate is not None:
            if shared is None:
                raise InvalidArgument("shared_gate given without a shared expert")
            _f32("shared_gate", shared_gate, 1, (hidden,))
            _finite("shared_gate", shared_gate)
            c.shared_gate = _ptr("float *", shared_gate)


def _expert_table(experts, n_experts, hidden):
    """An ExpertTable (given, or built from a sequence or mapping id -> ExpertView) of this layer's shape."""
    if not isinstance(experts, ExpertTable):
        return ExpertTable(experts, n_experts, hidden)
    if (experts.n_experts, experts.hidden) != (n_experts, hidden):
        raise InvalidArgument(f"expert table is for {experts.n_experts} experts of hidden {experts.hidden}, "
                              f"the call has {n_experts} experts of hidden {hidden}")
    return experts


class ExpertTable:
    """A layer's C array of expert pointers, built once and reused by Runtime.moe_forward
    (building it costs ~0.5 us per expert, a visible share of a batch-1 call). Holds its
    views, and so their buffers, alive. experts: sequence or mapping id -> ExpertView or None."""

    def __init__(self, experts, n_experts, hidden):
        self.n_experts, self.hidden = int(n_experts), int(hidden)
        self.views = dict(experts.items() if hasattr(experts, "items") else enumerate(experts))
        self.c = ffi.new("cb_expert *[]", self.n_experts)
        for i, v in self.views.items():
            if not 0 <= int(i) < self.n_experts:
                raise InvalidArgument(f"expert id {i} outside 0..{self.n_experts - 1}")
            if v is not None:
                self.c[int(i)] = _view(f"expert {i}", v, self.hidden).c
