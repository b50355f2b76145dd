"""Python side of the C core: the only importer of colibri_dist._native (cffi).

Role in the data flow: numpy arrays in, C calls, numpy arrays out. Every
argument is checked here before it reaches C (shape, dtype float32,
C-contiguity, hidden size, finite input); a failing C call raises
NativeError(message, code) with the cb_status code.

Finite-input policy: activations given to route / expert_forward /
shared_forward / moe_forward / combine must be finite; NaN or Inf raises
InvalidArgument naming the argument and the first bad row. Weights are
checked when quantized (format/quantize.py) and router logits again in C
(CB_E_NONFINITE -> NativeError) in case finite inputs overflow.
"""
from ..format import integrity as _integrity
from . import checks as _checks
from ._lib import NATIVE_ERRORS, check_status, simd_available, simd_force, simd_levels, simd_name
from .gating import GATING_KINDS, Gating
from .model_ops import (AttnSpec, MatrixView, embed, kv_write, log_softmax, matrix_from_array, matrix_view,
                        quantized_matrix, rmsnorm, rope_apply, seq_batch, split_rows)
from .runtime import ExpertTable, MoeLayer, Runtime, combine, gate_logits
from .fused_step import StepHead, fused_forward, pack_step
from .layer_ops import LayerPlan, Step, layer_forward
from .views import ExpertView, expert_view

_integrity.use_native(_checks)     # format/ checks CRCs and NaNs at memory speed once the core is loaded

__all__ = ["Gating", "GATING_KINDS", "Runtime", "ExpertTable", "MoeLayer", "LayerPlan", "Step", "layer_forward", "fused_forward", "combine", "gate_logits", "ExpertView", "expert_view",
           "simd_name", "simd_force", "simd_levels", "simd_available", "check_status", "NATIVE_ERRORS",
           "MatrixView", "matrix_view", "matrix_from_array", "quantized_matrix", "split_rows", "rmsnorm", "embed", "rope_apply",
           "log_softmax", "seq_batch",
           "AttnSpec", "kv_write", "StepHead", "pack_step"]
