"""Hot-add segments: persist, reopen, remove, crash mid-add keeps the previous state."""
import os

import numpy as np
import pytest

from colibri_dist.errors import FormatError
from colibri_dist.store import ExpertStore, Segments
from colibri_dist.store import segments as segmod

from store_fakes import fake_layout


def add_one(segs, layer, seed, base=8, nbytes=4096 + 640):
    rng = np.random.default_rng(seed)
    blob = rng.integers(0, 256, nbytes, dtype=np.uint8)
    row = rng.standard_normal(32).astype(np.float32)
    new_id, version = segs.add(layer, base, blob, fake_layout(nbytes), row, bias=0.25)
    return new_id, version, blob, row


def test_store_segments_persist_and_reopen(tmp_path):
    path = tmp_path / "m.colibri"
    segs = Segments(path)
    id1, v1, blob1, row1 = add_one(segs, 0, 1)
    id2, v2, blob2, _ = add_one(segs, 0, 2)
    id3, _, _, _ = add_one(segs, 1, 3)
    assert (id1, id2, id3) == (8, 9, 8) and v2 == v1 + 1
    segs.remove(0, 3)
    again = Segments(path)
    assert again.version == v2 + 2
    assert again.added(0) == [8, 9] and again.added(1) == [8]
    assert again.removed(0) == {3}
    assert np.array_equal(again.read(0, 8), blob1) and np.array_equal(again.view(0, 9), blob2)
    assert np.array_equal(again.router_row(0, 8), row1) and again.bias(0, 8) == 0.25
    assert again.layout(0, 8) == fake_layout(blob1.nbytes)


def test_store_segments_crash_before_commit_keeps_previous_state(tmp_path, monkeypatch):
    path = tmp_path / "m.colibri"
    segs = Segments(path)
    add_one(segs, 0, 1)
    real = segmod._rename

    def crash_on_manifest(src, dst):
        if dst.endswith(segmod.MANIFEST):
            raise OSError("simulated crash before the manifest rename")
        real(src, dst)

    monkeypatch.setattr(segmod, "_rename", crash_on_manifest)
    with pytest.raises(OSError, match="simulated crash"):
        add_one(segs, 0, 2)
    monkeypatch.setattr(segmod, "_rename", real)
    again = Segments(path)
    assert again.added(0) == [8] and again.version == 1
    assert not [f for f in os.listdir(again.dir) if f.startswith(".tmp-")]
    new_id, version, blob, _ = add_one(again, 0, 3)      # the orphan segment does not disturb ids
    assert (new_id, version) == (9, 2)
    assert np.array_equal(Segments(path).read(0, 9), blob)


def test_store_segments_damaged_blob_and_manifest(tmp_path):
    path = tmp_path / "m.colibri"
    segs = Segments(path)
    add_one(segs, 0, 1)
    seg_file = segs._entries[(0, 8)]["path"]
    with open(seg_file, "r+b") as f:
        f.seek(4096 + 5)
        f.write(b"\x00\x01\x02")
    with pytest.raises(Exception, match="hot-added expert 8 of layer 0 is damaged"):
        Segments(path).read(0, 8)
    with open(os.path.join(segs.dir, segmod.MANIFEST), "w") as f:
        f.write("{not json")
    with pytest.raises(FormatError, match="MANIFEST.json"):
        Segments(path)


def test_store_serves_added_expert_through_every_tier(fake_model, tmp_path):
    segs = Segments(fake_model.path)
    rng = np.random.default_rng(5)
    blob = rng.integers(0, 256, fake_model.nbytes, dtype=np.uint8)
    segs.add(1, 8, blob, fake_layout(fake_model.nbytes), np.zeros(32, np.float32), 0.0)
    for cache in [None, fake_model.nbytes]:
        with ExpertStore(fake_model, cache_bytes=cache, offload_dir=tmp_path / "off", segments=segs) as store:
            assert store.n_experts(1) == 9 and store.n_experts(0) == 8
            for _ in range(2):
                for e in [8, 0, 8]:
                    with store.get(1, e) as h:
                        want = blob if e == 8 else fake_model.blobs[(1, e)]
                        assert np.array_equal(h.blob, want)
            if cache is not None:
                assert store.stats()["ssd"]["hits"] > 0
