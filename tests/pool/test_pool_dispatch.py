"""Pool dispatch plumbing without Ray: grouping, per-worker requests, scatter back in slot order."""
import numpy as np

from colibri_dist.pool.dispatch import build_batches, group_by_expert, scatter, shared_chunks, split_hot


def test_group_by_expert_lists_every_token_slot_once_in_token_order():
    idx = np.array([[2, 0], [0, 1], [2, 1], [0, 2]], np.int32)
    groups = group_by_expert(idx)
    assert sorted(groups) == [0, 1, 2]
    assert groups[0][0].tolist() == [0, 1, 3] and groups[0][1].tolist() == [1, 0, 0]
    assert groups[2][0].tolist() == [0, 2, 3] and groups[2][1].tolist() == [0, 0, 1]
    pairs = {(int(t), int(s)) for tokens, slots in groups.values() for t, s in zip(tokens, slots)}
    assert pairs == {(t, s) for t in range(4) for s in range(2)}


def test_shared_chunks_cover_all_tokens_contiguously():
    spans = shared_chunks(10, [3, 0, 1])
    assert spans == {3: (0, 3), 0: (3, 7), 1: (7, 10)}
    assert shared_chunks(1, [0, 1]) == {1: (0, 1)}


def test_requests_index_the_shared_batch_and_scatter_rebuilds_slot_outputs():
    rng = np.random.default_rng(1)
    n, k, h, offset = 6, 2, 4, 10  # this micro-batch is tokens 10..15 of the layer batch
    x_all = rng.standard_normal((offset + n, h)).astype(np.float32)
    idx = np.array([[0, 1], [1, 2], [0, 2], [2, 3], [3, 0], [1, 3]], np.int32)
    groups = group_by_expert(idx)
    batches = build_batches(groups, {0: 0, 1: 1, 2: 1, 3: 0}, shared_chunks(n, [0, 1]))
    fake = lambda e, rows: rows * 10.0 + e  # stands in for an expert: depends on the row and e only
    slot_out = np.zeros((n, k, h), np.float32)
    shared = np.zeros((n, h), np.float32)
    for wk, batch in batches.items():
        req = batch.request(layer=3, version=7, offset=offset)
        assert req["layer"] == 3 and req["version"] == 7 and "x" not in req
        assert all(rows.dtype == np.int32 and rows.min() >= offset for _, rows in req["experts"])
        out = np.concatenate([fake(e, x_all[rows]) for e, rows in req["experts"]])
        sh = x_all[slice(*req["shared"])] * -1.0
        scatter(batch, {"out": out, "shared": sh}, slot_out, shared)
    x = x_all[offset:]
    for t in range(n):
        for j in range(k):
            assert np.array_equal(slot_out[t, j], x[t] * 10.0 + int(idx[t, j]))
    assert np.array_equal(shared, -x)
    assert sum(b.n_rows() for b in batches.values()) == n * k


def test_split_hot_cuts_only_experts_above_a_fair_share_with_spare_replicas():
    idx = np.array([[0, 1]] * 6 + [[0, 2]] * 2, np.int32)  # expert 0: 8 rows of 16, fair share 4 for 4 workers
    groups = group_by_expert(idx)
    units = split_hot(groups, lambda e: {0: 3, 1: 1, 2: 2}[e], n_live=4)
    assert sorted(units) == [(0, 0), (0, 1), (1, 0), (2, 0)]  # 0 -> 2 parts (8/4), 1 has no spare replica
    assert np.concatenate([units[(0, 0)][0], units[(0, 1)][0]]).tolist() == groups[0][0].tolist()
    assert len(units[(1, 0)][0]) == 6
    capped = split_hot(groups, lambda e: 2, n_live=8)  # fair share 2: expert 0 would want 4 parts, has 2 copies
    assert len([k for k in capped if k[0] == 0]) == 2
