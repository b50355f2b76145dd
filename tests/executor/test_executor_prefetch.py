"""Batch-union prefetch and one-layer lookahead: counted, and never change results."""
import numpy as np

import colibri_dist as cd
from engine_models import tokens


def test_engine_lookahead_prefetch_counts(engine_models):
    path = engine_models["mixtral"]
    xs = [tokens(3, seed=s) for s in range(6)]
    with cd.MoeExecutor(path, threads=1) as ref:
        want = [[ref.moe_forward(l, x) for l in (0, 1)] for x in xs]
        nb = ref.store.source.nbytes(0, 0)
    with cd.MoeExecutor(path, threads=1, cache_bytes=6 * nb, lookahead=True) as eng:
        for x, (y0, y1) in zip(xs, want):
            assert np.array_equal(eng.moe_forward(0, x), y0)
            assert np.array_equal(eng.moe_forward(1, x), y1)
        st = eng.stats()
    la = st["lookahead"]
    assert la["layers"] == len(xs) and la["actual"] > 0 and 0.0 <= la["recall"] <= 1.0
    assert la["hit"] <= min(la["actual"], la["predicted"])
    assert st["prefetch_issued"] > 0 and st["prefetch_used"] <= st["prefetch_issued"]
    assert st["hits"] + st["misses"] == st["gets"]
    with cd.MoeExecutor(path, threads=1, cache_bytes=6 * nb, lookahead=False) as eng:
        for x in xs:
            eng.moe_forward(0, x)
            eng.moe_forward(1, x)
        assert eng.stats()["lookahead"]["layers"] == 0
