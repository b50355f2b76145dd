"""Cache-friendly expert order (resident first) and honest hit counting.

A worker that runs every expert of a request in a fixed order under a budget
smaller than that set evicts each expert just before its next use (LRU's
cyclic worst case: 0 hits). experts_forward runs what is resident first; the
outputs must stay bit-identical since each expert is its own kernel call.
"""
import numpy as np

import colibri_dist as cd
from engine_models import N_EXPERTS, tokens


def _cycle(eng, x, rows, rounds, fixed_order):
    outs = []
    for _ in range(rounds):
        for layer in (0, 1):
            items = [(e, rows) for e in range(N_EXPERTS)]
            if fixed_order:
                outs.append([eng.expert_forward(layer, e, x, r) for e, r in items])
            else:
                outs.append(eng.experts_forward(layer, x, items))
    eng.store.wait_prefetch()
    st = eng.stats()
    assert st["hits"] + st["misses"] == st["gets"]
    return outs, st


def test_resident_first_order_hits_where_a_fixed_order_thrashes_and_bits_do_not_move(engine_models, tmp_path):
    path = engine_models["mixtral"]
    x = tokens(9, seed=3)
    rows = np.array([0, 2, 3, 8], dtype=np.int32)
    with cd.MoeExecutor(path, threads=1) as ref:
        nb = ref.store.source.nbytes(0, 0)
        want = [[ref.expert_forward(l, e, x, rows) for e in range(N_EXPERTS)] for l in (0, 1)]
    budget = (N_EXPERTS + 2) * nb        # fewer than the 2 x 8 experts each round touches
    with cd.MoeExecutor(path, threads=1, cache_bytes=budget, offload_dir=str(tmp_path / "a")) as eng:
        fixed, st_fixed = _cycle(eng, x, rows, rounds=4, fixed_order=True)
    with cd.MoeExecutor(path, threads=1, cache_bytes=budget, offload_dir=str(tmp_path / "b")) as eng:
        smart, st_smart = _cycle(eng, x, rows, rounds=4, fixed_order=False)
    for i, outs in enumerate(fixed + smart):
        for got, exp in zip(outs, want[i % 2]):
            assert np.array_equal(got, exp)
    assert st_fixed["ram"]["hits"] == 0                  # the cyclic worst case, as expected of LRU
    assert st_smart["ram"]["hits"] >= 3 * N_EXPERTS      # rounds 2..4 each reuse what the last left


def test_a_get_that_waits_for_an_in_flight_prefetch_is_a_miss(engine_models):
    path = engine_models["mixtral"]
    with cd.MoeExecutor(path, threads=1) as ref:
        nb = ref.store.source.nbytes(0, 0)
    with cd.MoeExecutor(path, threads=1, cache_bytes=4 * nb, source_delay_s=0.2) as eng:
        store = eng.store
        assert store.prefetch(0, [1]) == 1
        with store.get(0, 1):             # the load takes 0.2 s: this get waits for it
            pass
        st = store.stats()
        assert (st["ram"]["hits"], st["ram"]["misses"], st["prefetch_late"]) == (0, 1, 1)
        assert store.prefetch(0, [2]) == 1
        store.wait_prefetch()
        with store.get(0, 2):             # loaded before it was asked for: a hit
            pass
        st = store.stats()
        assert (st["ram"]["hits"], st["prefetch_late"], st["prefetch_used"]) == (1, 1, 2)
