"""Batch, order and thread invariance with exact equality; moe_forward == route + experts + shared + combine."""
import numpy as np
import pytest

from colibri_dist.native import Runtime, combine, simd_force, simd_name
from native_helpers import AVAILABLE_LEVELS, simd_params, random_layer

KINDS = [("softmax_topk_norm", {}), ("softmax_topk", {}),
         ("sigmoid_group", dict(n_group=4, topk_group=2, routed_scaling_factor=2.5))]
PATHS = simd_params()


@pytest.fixture(scope="module")
def runtimes():
    rts = {t: Runtime(threads=t) for t in (1, 2, 3)}
    yield rts
    for r in rts.values():
        r.close()


def _forward(rt, layer, x):
    return rt.moe_forward(x, layer["router"], layer["gating"], layer["experts"], bias=layer["bias"],
                          shared=layer.get("shared"), shared_gate=layer.get("shared_gate"))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("scheme", ["f32", "int8", "int8-g32", "bf16"])
@pytest.mark.parametrize("kind,kw", KINDS)
def test_batch_position_and_thread_invariance(runtimes, path, scheme, kind, kw):
    rng = np.random.default_rng(11)
    layer = random_layer(rng, hidden=72, inter=40, n_experts=8, top_k=3, kind=kind, shared=True,
                         scheme=scheme, **kw)
    x = rng.standard_normal((23, 72)).astype(np.float32)
    with simd_force(path):
        full, idx, w = _forward(runtimes[2], layer, x)
        for n in (1, 2, 5, 16, 23):                              # batch size / prefix
            y, i2, w2 = _forward(runtimes[1], layer, np.ascontiguousarray(x[:n]))
            assert np.array_equal(y, full[:n]) and np.array_equal(i2, idx[:n]) and np.array_equal(w2, w[:n])
        perm = rng.permutation(23)                               # position in the batch
        y, _, _ = _forward(runtimes[3], layer, np.ascontiguousarray(x[perm]))
        assert np.array_equal(y, full[perm])
        mixed = np.concatenate([x[3:4], rng.standard_normal((30, 72)).astype(np.float32)])  # other tokens share experts
        y, _, _ = _forward(runtimes[2], layer, mixed)
        assert np.array_equal(y[0], full[3])
        for t in (1, 3):
            assert np.array_equal(_forward(runtimes[t], layer, x)[0], full)
        with Runtime(threads=2, cpus=[0]) as pinned:                  # workers pinned to one CPU
            assert np.array_equal(_forward(pinned, layer, x)[0], full)


@pytest.mark.parametrize("kind,kw", KINDS)
def test_moe_forward_equals_the_separate_pieces(runtimes, kind, kw):
    rng = np.random.default_rng(12)
    layer = random_layer(rng, hidden=64, inter=32, n_experts=8, top_k=2, kind=kind, shared=True,
                         scheme="int8", **kw)
    x = rng.standard_normal((19, 64)).astype(np.float32)
    rt = runtimes[2]
    y, idx, w = _forward(rt, layer, x)
    idx2, w2 = rt.route(x, layer["router"], layer["gating"], bias=layer["bias"])
    assert np.array_equal(idx, idx2) and np.array_equal(w, w2)
    slot = np.zeros((19, 2, 64), np.float32)
    for e in np.unique(idx):
        t, j = np.nonzero(idx == e)
        slot[t, j] = runtimes[1].expert_forward(x, layer["experts"][e], rows=t)   # one expert, gathered rows
    shared = runtimes[3].shared_forward(x, layer["shared"], layer["shared_gate"])
    assert np.array_equal(combine(w, slot, shared), y)


def test_expert_rows_are_invariant_to_gathering(runtimes):
    rng = np.random.default_rng(13)
    layer = random_layer(rng, hidden=96, inter=52, scheme="int8-g32")
    x = rng.standard_normal((37, 96)).astype(np.float32)
    ex = layer["experts"][0]
    full = runtimes[2].expert_forward(x, ex)
    rows = np.array([36, 0, 5, 5, 17, 2], np.int32)
    assert np.array_equal(runtimes[3].expert_forward(x, ex, rows=rows), full[rows])
    for m in (2, 3, 4, 6):                                        # every token-tile shape of the kernels
        assert np.array_equal(runtimes[2].expert_forward(x, ex, rows=rows[:m]), full[rows[:m]])
    for r in (0, 36):
        assert np.array_equal(runtimes[1].expert_forward(np.ascontiguousarray(x[r:r + 1]), ex)[0], full[r])


def test_no_allocation_after_warm_up(runtimes):
    rng = np.random.default_rng(14)
    layer = random_layer(rng, shared=True)
    rt = Runtime(threads=2)
    x = rng.standard_normal((40, 64)).astype(np.float32)
    _forward(rt, layer, x)
    before = rt.stats()["arena_mallocs"]
    for n in (40, 1, 17, 40, 3):
        _forward(rt, layer, np.ascontiguousarray(x[:n]))
    assert rt.stats()["arena_mallocs"] == before
    assert rt.stats()["arena_high_water"] > 0
    _forward(rt, layer, np.concatenate([x] * 4))                  # a bigger batch grows the arena once
    assert rt.stats()["arena_mallocs"] == before + 1
    rt.close()


def test_a_reused_expert_table_gives_the_same_bits_and_is_checked():
    """ExpertTable is built once per layer and reused across calls (the MoeExecutor's mapped path):
    same bits as passing the views; a table of the wrong shape is refused."""
    from colibri_dist.errors import InvalidArgument
    from colibri_dist.format.quantize import pack_expert
    from colibri_dist.native import ExpertTable, Gating, Runtime, expert_view
    rng = np.random.default_rng(4)
    h, inter, E = 48, 40, 6
    views = [expert_view(*pack_expert(rng.standard_normal((inter, h), dtype=np.float32),
                                      rng.standard_normal((inter, h), dtype=np.float32),
                                      rng.standard_normal((h, inter), dtype=np.float32), "int8"))
             for _ in range(E)]
    router = rng.standard_normal((E, h), dtype=np.float32)
    gating = Gating("softmax_topk_norm", E, 2)
    table = ExpertTable(views, E, h)
    with Runtime(threads=2) as rt:
        for n in (1, 5):
            x = rng.standard_normal((n, h), dtype=np.float32)
            want = rt.moe_forward(x, router, gating, views)
            for _ in range(2):
                got = rt.moe_forward(x, router, gating, table)
                assert all(np.array_equal(a, b) for a, b in zip(got, want))
        with pytest.raises(InvalidArgument, match="expert table is for 6 experts"):
            rt.moe_forward(x, router[:5], Gating("softmax_topk_norm", 5, 2), table)
