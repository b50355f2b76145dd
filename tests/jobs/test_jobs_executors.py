"""Executor selection and stats normalization, without Ray (Pool.attach and the service state are faked)."""
import pytest

from colibri_dist.config import load_config
from colibri_dist.errors import InvalidArgument, PoolError
from colibri_dist.jobs.run import executors as X


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
    monkeypatch.setattr(Pool, "attach", classmethod(lambda cls, name, ray_address=None:
                                                    AttachedPool(name, ray_address, state.get("w8a8", True))))
    return state


class AttachedPool:
    def __init__(self, name, address, w8a8):
        self.name, self.address, self.w8a8, self.detached = name, address, w8a8, False

    def shutdown(self):
        self.detached = True


def test_named_pool_is_attached_when_running(tmp_path, fake_service):
    model = tmp_path / "m.colibri"
    model.write_bytes(b"x")
    cfg = cfg_with(tmp_path, "{name: svc}")
    with pytest.raises(PoolError, match="no running pool named 'svc' is recorded.*colibri pool start CONFIG --pool svc"):
        X.open_executor(cfg, str(model), None)
    fake_service.update(address="127.0.0.1:6379", model=str(tmp_path / "other.colibri"))
    with pytest.raises(InvalidArgument, match="serves .*other.colibri, but the model asked is"):
        X.open_executor(cfg, str(model), None)
    fake_service["model"] = str(model)
    pool = X.open_executor(cfg, str(model), None).pool
    assert (pool.name, pool.address, pool.detached) == ("svc", "127.0.0.1:6379", False)


def test_a_named_pool_in_another_arithmetic_is_refused(tmp_path, fake_service):
    model = tmp_path / "m.colibri"
    model.write_bytes(b"x")
    fake_service.update(address="127.0.0.1:6379", model=str(model), w8a8=False)
    with pytest.raises(InvalidArgument, match="pool 'svc' runs w8a8=False but w8a8=True was asked"):
        X.open_executor(cfg_with(tmp_path, "{name: svc}"), str(model), None)
    cfg = cfg_with(tmp_path, "{name: svc}")
    cfg.job.w8a8 = False
    assert X.open_executor(cfg, str(model), None).pool.w8a8 is False


def test_pool_stats_are_normalized_and_summed_over_workers():
    class FakePool:
        def stats(self):
            return {"retries": 2, "workers": [
                {"index": 0, "tokens": 10, "experts": 3, "cpus": [0], "node": "n",
                 "cache": {"hits": 4, "misses": 1, "evictions": 0, "bytes_loaded": 100}},
                {"index": 1, "tokens": 30, "experts": 5, "cpus": [1], "node": "n", "alive": False}]}
    ex = X.PoolExecutor(FakePool())
    s = ex.stats()
    assert s["cache"] == {"hits": 4, "misses": 1, "evictions": 0, "bytes_loaded": 100}
    assert s["retries"] == 2
    assert [(w["id"], w["tokens"], w["experts"]) for w in s["workers"]] == [(0, 10, 3), (1, 30, 5)]


def test_executor_line_says_per_worker_only_for_a_pool(tmp_path):
    from colibri_dist.jobs.pipeline import _executor_line
    engine = _executor_line(cfg_with(tmp_path, "{workers: 0, cache_bytes: 2MiB}"), "/tmp/off")
    assert "in-process" in engine and "2.00 MiB" in engine and "per worker" not in engine
    pool = _executor_line(cfg_with(tmp_path, "{workers: 2, cache_bytes: 2MiB}"), "/tmp/off")
    assert "2 workers" in pool and "2.00 MiB per worker" in pool


def test_no_hit_rate_is_claimed_without_a_cache_limit(tmp_path):
    from colibri_dist.jobs.reports.metrics import hit_rate_text
    from colibri_dist.jobs.reports.report import without_limit
    cache = {"hits": 8, "misses": 0, "evictions": 0, "bytes_loaded": 0, "hit_rate": 1.0}
    unlimited = without_limit(dict(cache), cfg_with(tmp_path, "{workers: 0}"))
    assert unlimited["hit_rate"] is None and unlimited["no_limit"] is True
    assert hit_rate_text(unlimited).startswith("n/a (no cache limit")
    limited = without_limit(dict(cache), cfg_with(tmp_path, "{workers: 0, cache_bytes: 1MiB}"))
    assert limited["hit_rate"] == 1.0 and hit_rate_text(limited) == "100.0%"


def test_a_pool_w8a8_that_disagrees_with_the_job_is_refused_before_the_pool_starts(tmp_path, monkeypatch):
    from colibri_dist.jobs.generation import llm as generation_llm
    model = tmp_path / "m.colibri"
    model.write_bytes(b"x")
    path = tmp_path / "job.yaml"
    path.write_text(f"job: {{kind: generate, input: in.jsonl, w8a8: false}}\nmodel: {model}\n"
                    f"pool: {{workers: 2, w8a8: true}}\n")
    monkeypatch.setattr("colibri_dist.front.open_pool", lambda *a: pytest.fail("started a pool"))
    with pytest.raises(InvalidArgument, match="job.w8a8 is False but pool.w8a8 is True"):
        generation_llm.open_job_llm(load_config(str(path)))


@pytest.mark.parametrize("job, pool, want", [("", "", True), ("w8a8: false", "", False),
                                             ("w8a8: false", ", w8a8: false", False), ("", ", w8a8: true", True)])
def test_the_jobs_own_pool_and_engine_run_the_jobs_arithmetic(tmp_path, monkeypatch, job, pool, want):
    from colibri_dist import moe_executor as engine_module
    from colibri_dist import pool as pool_module
    seen = {}
    monkeypatch.setattr(pool_module, "Pool", lambda path, **kw: seen.setdefault("pool", kw["w8a8"]))
    monkeypatch.setattr(engine_module, "MoeExecutor", lambda path, **kw: seen.setdefault("engine", kw["w8a8"]))
    path, model = tmp_path / "job.yaml", tmp_path / "m.colibri"
    model.write_bytes(b"x")
    path.write_text(f"job: {{kind: token-classification, {job}}}\npool: {{workers: 2{pool}}}\n")
    X.open_executor(load_config(str(path)), str(model), None)
    cfg = load_config(str(path))
    cfg.job.executor = "engine"
    X.open_executor(cfg, str(model), None)
    assert seen == {"pool": want, "engine": want}
