"""Fault injectors and their helpers without Ray: each one really breaks what it says, and its check
can fail. A fake context stands in for the harness."""
import os
import time

import numpy as np
import pytest

from colibri_dist.config import DemoConfig, DemoDatasetConfig
from colibri_dist.demos.classifier import ensure_demo
from colibri_dist.stress import faults, offload_fs, worker_hooks
from colibri_dist.stress.reference import ExpertTable, Reference, link_model, new_expert_weights
from colibri_dist.stress.schedule import FaultEvent


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    demo = DemoConfig(seed=3, hidden=64, inter=128, layers=2, experts=16, top_k=2,
                      cache_dir=str(tmp_path_factory.mktemp("demo")),
                      dataset=DemoDatasetConfig(shards=1, rows_per_shard=4, seq_len=4))
    return ensure_demo(demo, log=lambda *a: None).model


class Ctx:
    """The harness attributes the injectors use."""

    def __init__(self, tmp_path, model_path=None):
        self.offload_dir = str(tmp_path / "offload")
        os.makedirs(self.offload_dir, exist_ok=True)
        self.control_dir = str(tmp_path / "control")
        self.rng = np.random.default_rng(0)
        self.slow_source_ms = 5
        self.pool_model_path = model_path
        self.offload_fs = offload_fs.OffloadFs(self.offload_dir, "dir")
        self.failures = 0

    def checksum_failures(self):
        return self.failures


def test_corrupt_spill_flips_payload_bytes_only(tmp_path):
    ctx = Ctx(tmp_path)
    d = tmp_path / "offload" / "worker-0" / "colibri-spill-x"
    d.mkdir(parents=True)
    original = bytes(range(256)) * 40
    (d / "L0-E3.spill").write_bytes(original)
    rec = faults.Injectors(ctx).inject(FaultEvent(1.0, "corrupt_spill"), 1.0)
    assert rec.injected and rec.detail["file"] == "worker-0/colibri-spill-x/L0-E3.spill"
    damaged = (d / "L0-E3.spill").read_bytes()
    diff = [i for i in range(len(original)) if original[i] != damaged[i]]
    assert diff and min(diff) >= 4096 and len(diff) == 16


def test_corrupt_spill_is_skipped_when_nothing_was_spilled(tmp_path):
    rec = faults.Injectors(Ctx(tmp_path)).inject(FaultEvent(1.0, "corrupt_spill"), 1.0)
    assert not rec.injected and "no spill file" in rec.skipped


def test_enospc_on_a_plain_dir_is_skipped_not_faked(tmp_path):
    rec = faults.Injectors(Ctx(tmp_path)).inject(FaultEvent(1.0, "enospc"), 1.0)
    assert not rec.injected and "plain directory" in rec.skipped


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a filesystem needs root")
def test_offload_fs_fill_gives_real_enospc_and_clear_gives_space_back(tmp_path):
    fs = offload_fs.make_offload_fs(str(tmp_path / "off"), "auto", 16 << 20)
    try:
        assert fs.kind in ("loop", "tmpfs") and fs.can_fill
        fs.fill()
        with pytest.raises(OSError) as exc:
            with open(tmp_path / "off" / "spill", "wb") as f:
                f.write(b"x" * 65536)
                f.flush()
                os.fsync(f.fileno())
        assert exc.value.errno == 28           # ENOSPC
        fs.clear()
        assert fs.free_bytes() > 8 << 20
    finally:
        fs.close()
    assert not os.path.ismount(tmp_path / "off")


def test_slow_source_hook_delays_model_reads_only_while_on(tmp_path, tiny_model, monkeypatch):
    from colibri_dist.format.reader import open_model
    from colibri_dist.store import source
    monkeypatch.setenv(worker_hooks.CONTROL_ENV, str(tmp_path))
    monkeypatch.setattr(source.ModelSource, "read", source.ModelSource.read)   # undone after the test
    worker_hooks.install()
    src = source.ModelSource(open_model(tiny_model))

    def timed():
        t = time.perf_counter()
        src.read(0, 1)
        return time.perf_counter() - t
    worker_hooks.set_slow_source(str(tmp_path), 80)
    time.sleep(0.06)
    assert timed() >= 0.08
    worker_hooks.set_slow_source(str(tmp_path), 0)
    time.sleep(0.06)
    assert timed() < 0.08


def test_truncated_segment_is_ignored_on_reopen_and_check_catches_divergence(tmp_path, tiny_model):
    from colibri_dist.format.reader import open_model
    from colibri_dist.store.segments import Segments
    path = link_model(tiny_model, str(tmp_path / "pool"))
    ref = Reference(path)
    model = open_model(path)
    table = ExpertTable(model)
    weights, row = new_expert_weights(np.random.default_rng(1), table.hidden, table.inter, 1.0)
    new_id = ref.add_expert(0, weights, row)
    table.record_add(0, new_id, row)
    ctx = Ctx(tmp_path, path)
    ctx.table = table
    ctx.segments_version = lambda: Segments(path).version
    ctx.reopened_table = lambda: {l: (Segments(path).added(l), sorted(Segments(path).removed(l)))
                                  for l in table.layers if Segments(path).added(l) or Segments(path).removed(l)}
    inj = faults.Injectors(ctx)
    rec = inj.inject(FaultEvent(1.0, "truncate_segment"), 1.0)
    seg = os.path.join(path + ".experts", rec.detail["segment"])
    assert rec.injected and os.path.getsize(seg) == rec.detail["kept_bytes"] < 4096 + 1000
    assert inj.verify(rec) is True
    x = np.random.default_rng(2).standard_normal((16, table.hidden)).astype(np.float32)
    with __import__("colibri_dist").MoeExecutor(path) as reopened:      # a reopen serves the committed table
        assert np.array_equal(reopened.moe_forward(0, x), ref.forward(0, x))
    table.record_remove(0, 3)                       # the table now claims a change the files do not have
    assert inj.verify(rec) is False and "expected" in rec.checks
    ref.close()


def test_table_rejects_an_unexpected_hot_add_id(tiny_model):
    from colibri_dist.format.reader import open_model
    table = ExpertTable(open_model(tiny_model))
    with pytest.raises(AssertionError, match="expected 16"):
        table.record_add(0, 17, np.zeros(table.hidden, np.float32))
