"""Executor selection and stats normalization, without Ray (Pool.attach and the service state are faked)."""
import pytest

from colibri_dist.config import load_config
from colibri_dist.errors import InvalidArgument, PoolError
from colibri_dist.jobs import executors as X


def cfg_with(tmp_path, pool):
    path = tmp_path / "job.yaml"
    path.write_text(f"job: {{kind: token-classification}}\npool: {pool}\n")
    return load_config(str(path))


def test_engine_is_chosen_for_zero_workers_or_engine_executor(tmp_path):
    assert not X.uses_pool(cfg_with(tmp_path, "{workers: 0}"))
    cfg = cfg_with(tmp_path, "{workers: 2}")
    assert X.uses_pool(cfg) and not X.attaches_to_named_pool(cfg)
    cfg.job.executor = "engine"
    assert not X.uses_pool(cfg)
    assert X.attaches_to_named_pool(cfg_with(tmp_path, "{name: svc}"))


@pytest.fixture
def fake_service(monkeypatch):
    from colibri_dist.pool import Pool, service
    state = {}
    monkeypatch.setattr(service, "resolve_address", lambda name, address=None: state.get("address"))
    monkeypatch.setattr(service, "read_state", lambda name: dict(state) or None)
    monkeypatch.setattr(Pool, "attach", classmethod(lambda cls, name, ray_address=None: ("attached", name, ray_address)))
    return state


def test_named_pool_is_attached_when_running(tmp_path, fake_service):
    model = tmp_path / "m.colibri"
    model.write_bytes(b"x")
    cfg = cfg_with(tmp_path, "{name: svc}")
    with pytest.raises(PoolError, match="no pool of that name is running; start it with `colibri pool start"):
        X.PoolExecutor(cfg, str(model), None)
    fake_service.update(address="127.0.0.1:6379", model=str(tmp_path / "other.colibri"))
    with pytest.raises(InvalidArgument, match="serves .*other.colibri, but the job's model is"):
        X.PoolExecutor(cfg, str(model), None)
    fake_service["model"] = str(model)
    assert X.PoolExecutor(cfg, str(model), None).pool == ("attached", "svc", "127.0.0.1:6379")


def test_pool_stats_are_normalized_and_summed_over_workers():
    class FakePool:
        def stats(self):
            return {"retries": 2, "workers": [
                {"index": 0, "tokens": 10, "experts": 3, "cpus": [0], "node": "n",
                 "cache": {"hits": 4, "misses": 1, "evictions": 0, "bytes_loaded": 100}},
                {"index": 1, "tokens": 30, "experts": 5, "cpus": [1], "node": "n", "alive": False}]}
    ex = X.PoolExecutor.__new__(X.PoolExecutor)
    ex.pool = FakePool()
    s = ex.stats()
    assert s["cache"] == {"hits": 4, "misses": 1, "evictions": 0, "bytes_loaded": 100}
    assert s["retries"] == 2
    assert [(w["id"], w["tokens"], w["experts"]) for w in s["workers"]] == [(0, 10, 3), (1, 30, 5)]
