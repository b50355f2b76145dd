"""The Python gating-kind table (format/gating_spec.KINDS) equals C's cb_gating_kind, row by row.

Names and codes against the CB_GATE_* enum (both ways), C refuses the first code past the table, and
each row's semantic columns (scores, renormalisation, groups, scaling, what the bias is: the router's logit
bias or a selection-only correction) as routing/policy.py's numpy reference reads them give the same experts
and weights as cb_gate_logits, with and without a bias.
"""
import numpy as np
import pytest

from colibri_dist import native
from colibri_dist._native import ffi, lib
from colibri_dist.errors import InvalidArgument
from colibri_dist.format import gating_spec, spec
from colibri_dist.format.gating_spec import KINDS, GatingSpec
from colibri_dist.routing.policy import _final_weights, gate_scores


def test_table_equals_the_c_enum_both_ways():
    c_enum = {name[len("CB_GATE_"):].lower(): getattr(lib, name) for name in dir(lib) if name.startswith("CB_GATE_")}
    assert {k.name: k.code for k in KINDS} == c_enum
    assert [k.code for k in KINDS] == list(range(len(KINDS)))
    assert spec.GATING_KINDS is gating_spec.GATING_KINDS and spec.GATING_NAMES is gating_spec.GATING_NAMES


def _c_gate(code, logits, k):
    g = ffi.new("cb_gating *")
    g.kind, g.n_experts, g.top_k, g.n_group, g.topk_group = code, logits.shape[1], k, 1, 1
    g.norm_topk_prob, g.routed_scaling_factor = 1, 1.0
    idx = np.empty((logits.shape[0], k), np.int32)
    w = np.empty((logits.shape[0], k), np.float32)
    st = lib.cb_gate_logits(g, ffi.cast("float *", logits.ctypes.data), ffi.NULL, logits.shape[0],
                            ffi.cast("int32_t *", idx.ctypes.data), ffi.cast("float *", w.ctypes.data))
    return st, idx, w


def test_c_accepts_every_row_and_refuses_the_code_past_the_table():
    logits = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    for k in KINDS:
        assert _c_gate(k.code, logits, 2)[0] == lib.CB_OK, k.name
    for code in (len(KINDS), -1):
        assert _c_gate(code, logits, 2)[0] == lib.CB_E_INVALID


def _gatings(kind):
    if not kind.grouped:
        return [GatingSpec(kind.name, 8, 3)]
    return [GatingSpec(kind.name, 8, 3, n_group=4, topk_group=2, norm_topk_prob=norm, routed_scaling_factor=2.5)
            for norm in (True, False)]


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_each_rows_semantics_match_cb_gate_logits(kind, with_bias):
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((16, 8)).astype(np.float32)
    bias = (rng.standard_normal(8) * 0.3).astype(np.float32) if with_bias else None
    for g in _gatings(kind):
        idx, w = native.gate_logits(logits, g, bias)
        sel, score = gate_scores(logits, np.eye(8, dtype=np.float32), g, bias)
        for t in range(16):
            want = np.argsort(-sel[t], kind="stable")[:3]
            assert sorted(idx[t]) == sorted(want), (g, t)
            ref = dict(zip(want, _final_weights(score[t, want], g)))
            np.testing.assert_allclose(w[t], [ref[e] for e in idx[t]], rtol=2e-6, atol=1e-7)


def test_an_unknown_kind_is_refused_by_name():
    with pytest.raises(InvalidArgument, match="'softmax_top2' unknown; expected one of"):
        GatingSpec("softmax_top2", 8, 2)
    with pytest.raises(InvalidArgument, match="unknown gating kind 7"):
        gate_scores(np.ones((1, 2)), np.eye(2), 7)


def test_a_logit_bias_changes_both_selection_and_weights():
    # gpt-oss's router: softmax over the top-k of (x W^T + b), as transformers' GptOssTopKRouter
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((32, 8)).astype(np.float32)
    bias = (rng.standard_normal(8) * 1.5).astype(np.float32)
    idx, w = native.gate_logits(logits, GatingSpec("softmax_topk_norm", 8, 3), bias)
    top, ref_idx = torch.topk(torch.from_numpy(logits) + torch.from_numpy(bias), 3, dim=-1)
    assert np.array_equal(idx, ref_idx.numpy())
    np.testing.assert_allclose(w, torch.softmax(top, dim=1).numpy(), rtol=1e-6, atol=1e-7)
    plain, _ = native.gate_logits(logits, GatingSpec("softmax_topk_norm", 8, 3))
    assert not np.array_equal(plain, idx)
