"""Many threads getting and releasing under a tiny budget: entries in use stay intact."""
import threading

import numpy as np

from colibri_dist.store import ExpertStore


def test_store_concurrent_gets_never_see_overwritten_blobs(fake_model, tmp_path):
    store = ExpertStore(fake_model, cache_bytes=3 * fake_model.nbytes, offload_dir=tmp_path / "off",
                        policy="lfru", prefetch_workers=2)
    errors, gets = [], [0]
    lock = threading.Lock()

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(150):
                layer, e = int(rng.integers(0, 2)), int(rng.integers(0, 8))
                if rng.random() < 0.1:
                    store.prefetch(layer, [int(rng.integers(0, 8))])
                with store.get(layer, e) as h:
                    first = h.blob[:64].copy()
                    if not np.array_equal(h.blob, fake_model.blobs[(layer, e)]):
                        errors.append((layer, e, "wrong blob"))
                    if not np.array_equal(h.blob[:64], first):
                        errors.append((layer, e, "changed while held"))
                with lock:
                    gets[0] += 1
        except Exception as exc:          # surfaced below
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.wait_prefetch()
    st = store.stats()
    store.close()
    assert errors == []
    assert st["gets"] == gets[0] == 900
    assert st["hits"] + st["misses"] == st["gets"]
    assert st["resident_bytes"] <= 3 * fake_model.nbytes
    assert st["evictions"] > 0
