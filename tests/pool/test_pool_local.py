"""Pool on one local Ray (shared by the whole module): bit identity with the MoeExecutor, failover,
bad input, named service + hot-add from a second process through the CLI."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import ray

import colibri_dist as cd
from colibri_dist.errors import FormatError, InvalidArgument, PoolError
from colibri_dist.pool import Pool
from colibri_dist.testing.pytest_ray import init_local

FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3", "gpt_oss")

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_address():
    init_local(num_cpus=4)                  # retried under load (colibri_dist/testing/pytest_ray.py)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def _x(n, h, seed):
    return np.random.default_rng(seed).standard_normal((n, h)).astype(np.float32)


def _reference(path, layer, x):
    with cd.MoeExecutor(path, threads=1) as eng:
        return eng.moe_forward(layer, x), eng.route(layer, x)


def _check_identical(pool, path, n=37, seed=0):
    layer = cd.open_model(path).moe_layers[-1]
    h = cd.open_model(path).config.hidden
    x = _x(n, h, seed)
    y_ref, (idx_ref, w_ref) = _reference(path, layer, x)
    y = pool.moe_forward(layer, x)
    assert y.dtype == np.float32 and y.shape == (n, h)
    assert np.array_equal(y, y_ref)
    idx, w = pool.route(layer, x)
    assert np.array_equal(idx, idx_ref) and np.array_equal(w, w_ref)
    return layer, x


@pytest.mark.parametrize("family", ["qwen2_moe", "deepseek_v3"])
def test_routing_in_the_router_gives_the_same_bits_as_routing_in_the_caller(ray_address, tiny_models, family):
    from colibri_dist.pool.config import PoolConfig
    path = tiny_models[family]
    with Pool(path, PoolConfig(workers=2, threads_per_worker=1, micro_batch=8, routing_at="router")) as pool:
        _check_identical(pool, path, seed=3)
        st = pool.stats()
        assert st["routing_at"] == "router" and st["tokens"] == 37 * cd.open_model(path).config.top_k


def test_min_request_rows_uses_fewer_workers_per_micro_batch_with_the_same_bits(ray_address, tiny_models):
    path = tiny_models["olmoe"]
    with Pool(path, workers=3, threads_per_worker=1, micro_batch=8, min_request_rows=8) as pool:
        layer, _ = _check_identical(pool, path, n=40, seed=4)  # 8 tokens x 2 = 16 rows -> 2 of 3 workers
        st = pool.stats()
        assert sum(w["requests"] for w in st["workers"]) <= 2 * 5  # 5 micro-batches, <= 2 requests each
        assert st["tokens"] == 40 * 2 and st["config"].min_request_rows == 8


@pytest.mark.parametrize("family", FAMILIES)
def test_pool_equals_engine_bit_for_bit_with_and_without_replicas(ray_address, tiny_models, family):
    path = tiny_models[family]
    with Pool(path, workers=2, threads_per_worker=1, micro_batch=8) as pool:
        _check_identical(pool, path, seed=1)
        pool.rebalance(replicas=4)  # hot experts from the measured loads get copies on the other worker
        _check_identical(pool, path, seed=2)
        _check_identical(pool, path, seed=3)
        st = pool.stats()
        assert st["off_home"] > 0  # some expert batches really ran on a non-home replica
        assert st["retries"] == 0
        assert sum(w["tokens"] for w in st["workers"]) == st["tokens"] == 3 * 37 * 2


def test_the_workers_run_the_pools_arithmetic_and_each_mode_equals_the_engines(ray_address, tiny_models):
    """w8a8 (the default) and the exact-weights mode (w8a8=False) each give the in-process MoeExecutor's bits."""
    path = tiny_models["olmoe"]
    layer, h = cd.open_model(path).moe_layers[-1], cd.open_model(path).config.hidden
    x = _x(29, h, 7)
    got = {}
    for w8a8 in (True, False):
        with Pool(path, workers=2, threads_per_worker=1, micro_batch=8, w8a8=w8a8) as pool:
            assert pool.w8a8 is w8a8
            got[w8a8] = pool.moe_forward(layer, x)
        with cd.MoeExecutor(path, threads=1, w8a8=w8a8) as eng:
            assert np.array_equal(got[w8a8], eng.moe_forward(layer, x))
    assert not np.array_equal(got[True], got[False])
    with pytest.raises(InvalidArgument, match="pool.w8a8 must be true or false"):
        Pool(path, workers=1, w8a8="yes")


@pytest.mark.parametrize("workers,replicas,family,tier", [  # tier: where workers' experts come from
    (1, 0, "qwen2_moe", "spill"), (3, 2, "qwen2_moe", "ram"), (4, 6, "deepseek_v3", "mmap")])
def test_pool_equals_engine_for_1_to_4_workers(ray_address, tiny_models, tmp_path, workers, replicas, family, tier):
    path = tiny_models[family]
    tiers = {"mmap": {}, "ram": {"cache_bytes": 4096},  # 2 experts of 1792 B per worker: constant eviction
             "spill": {"cache_bytes": 4096, "offload_dir": str(tmp_path / "spill"), "compression": "zstd"}}
    with Pool(path, workers=workers, threads_per_worker=1, replicas=replicas, micro_batch=16,
              balancer={"kind": "token-bucket", "window": 8, "threshold": 1.5}, **tiers[tier]) as pool:
        _check_identical(pool, path, n=53, seed=workers)
        st = pool.stats()
        assert len(st["workers"]) == workers and all(w["alive"] for w in st["workers"])
        assert all(w["numa"]["mode"] in ("numa", "fallback", "unpinned") for w in st["workers"])  # pinning ran
        evictions = sum(w["cache"]["evictions"] for w in st["workers"])
        assert (evictions > 0) == (tier != "mmap")
        if tier == "spill":
            assert sum(w["cache"]["spill_bytes"] for w in st["workers"]) > 0
        assert len({w["pid"] for w in st["workers"]}) == workers


def test_bad_input_gets_named_errors_before_or_from_the_pool(ray_address, tiny_models, tmp_path):
    with pytest.raises(InvalidArgument, match="unknown balancer 'fast'"):
        Pool(tiny_models["mixtral"], workers=2, balancer="fast")
    with pytest.raises(InvalidArgument, match="pool.workers"):
        Pool(tiny_models["mixtral"], workers=0)
    with pytest.raises(InvalidArgument, match="routing.policy"):
        Pool(tiny_models["mixtral"], workers=1, routing_policy="fastest")
    bad = tmp_path / "not-a-model.colibri"
    bad.write_bytes(b"garbage" * 100)
    with pytest.raises(FormatError, match="not-a-model.colibri"):
        Pool(str(bad), workers=1)
    path = tiny_models["mixtral"]
    layer = cd.open_model(path).moe_layers[0]
    with Pool(path, workers=1, threads_per_worker=1) as pool:
        with pytest.raises(InvalidArgument, match=r"shape \[n, 32\]"):
            pool.moe_forward(layer, np.zeros((3, 31), np.float32))
        with pytest.raises(InvalidArgument, match="float32"):
            pool.moe_forward(layer, np.zeros((3, 32), np.float64))
        with pytest.raises(InvalidArgument, match="layer 99"):
            pool.moe_forward(99, np.zeros((3, 32), np.float32))
        with pytest.raises(InvalidArgument, match="NaN"):
            pool.moe_forward(layer, np.full((2, 32), np.nan, np.float32))
        assert pool.moe_forward(layer, np.zeros((0, 32), np.float32)).shape == (0, 32)  # like the MoeExecutor
        _check_identical(pool, path, n=5)  # still serving after the errors
        _check_identical(pool, path, n=1200)  # 150 KB: x travels by object reference, not inline


def test_sigkilled_worker_mid_batch_is_retried_bit_identically_without_losing_tokens(ray_address, tiny_models):
    path = tiny_models["qwen3_moe"]
    layer = cd.open_model(path).moe_layers[-1]
    n, k = 96, 2
    x = _x(n, 32, 7)
    y_ref, _ = _reference(path, layer, x)
    with Pool(path, workers=2, threads_per_worker=1, micro_batch=8, worker_delay_s=0.15,
              max_restarts=2) as pool:
        victim = pool.stats()["workers"][0]["pid"]
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("y", pool.moe_forward(layer, x)))
        t.start()
        time.sleep(0.6)  # 12 micro-batches x ~0.15 s each per worker: the batch is mid-flight
        assert t.is_alive()
        os.kill(victim, signal.SIGKILL)
        t.join(timeout=120)
        assert np.array_equal(out["y"], y_ref)
        st = pool.stats()
        assert st["retries"] >= 1
        assert sum(w["tokens"] for w in st["workers"]) == n * k  # each (token, slot) exactly once
        # Ray restarts the actor; once its ping answers it takes work again, still bit-identical
        deadline = time.time() + 60
        while time.time() < deadline and not all(w["alive"] for w in pool.stats()["workers"]):
            time.sleep(0.5)
        st = pool.stats()
        assert all(w["alive"] for w in st["workers"])
        assert victim not in {w["pid"] for w in st["workers"]}
        assert np.array_equal(pool.moe_forward(layer, x), y_ref)


def test_every_worker_killed_at_once_waits_for_restarts_and_loses_nothing(ray_address, tiny_models):
    """Both workers SIGKILLed mid-batch, and their restarted successors again between batches:
    every batch completes bit-identically and each (token, slot) is credited exactly once."""
    path = tiny_models["mixtral"]
    layer = cd.open_model(path).moe_layers[-1]
    n, k = 64, 2
    x = _x(n, 32, 11)
    y_ref, _ = _reference(path, layer, x)
    with Pool(path, workers=2, threads_per_worker=1, micro_batch=8, worker_delay_s=0.1,
              max_restarts=3) as pool:
        victims = [w["pid"] for w in pool.stats()["workers"]]
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("y", pool.moe_forward(layer, x)))
        t.start()
        time.sleep(0.4)
        assert t.is_alive()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        t.join(timeout=120)
        assert np.array_equal(out["y"], y_ref)
        for pid in pool.worker_pids():  # kill the restarted ones too, unknown to the router
            os.kill(pid, signal.SIGKILL)
        assert np.array_equal(pool.moe_forward(layer, x), y_ref)
        st = pool.stats()
        assert st["retries"] >= 2
        assert sum(w["tokens"] for w in st["workers"]) == 2 * n * k  # each (token, slot) exactly once per batch
        assert not set(victims) & set(pool.worker_pids())


def _cli(*args, check=True):
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    proc = subprocess.run([sys.executable, "-m", "colibri_dist", *args], capture_output=True, text=True,
                          env=env, timeout=180)
    if check and proc.returncode != 0:
        raise AssertionError(f"colibri {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def _new_expert_files(tmp_path, h, inter, seed=5):
    from safetensors.numpy import save_file
    rng = np.random.default_rng(seed)
    weights = {"gate": rng.standard_normal((inter, h)).astype(np.float32) * 0.3,
               "up": rng.standard_normal((inter, h)).astype(np.float32) * 0.3,
               "down": rng.standard_normal((h, inter)).astype(np.float32) * 0.3}
    save_file(weights, str(tmp_path / "expert.safetensors"))
    row = rng.standard_normal(h).astype(np.float32) * 3.0  # strong row: many tokens pick the new expert
    np.save(str(tmp_path / "row.npy"), row)
    return weights, row


def test_named_service_started_by_cli_takes_a_hot_add_from_another_process(ray_address, fresh_model, tmp_path,
                                                                          monkeypatch):
    path = fresh_model("mixtral")
    cfg = tmp_path / "pool.yaml"
    cfg.write_text(f"model: {path}\npool:\n  name: svc\n  workers: 2\n  threads_per_worker: 1\n"
                   f"  balancer: {{kind: round-robin}}\n")
    monkeypatch.setenv("COLIBRI_STATE_DIR", str(tmp_path / "state"))
    started = _cli("pool", "start", str(cfg), "--address", ray_address)
    assert "pool 'svc' running" in started.stdout
    try:
        pool = Pool.attach("svc")
        model = cd.open_model(path)
        layer, h, inter = model.moe_layers[0], model.config.hidden, model.config.inter
        base = len(pool.list_experts()[layer])
        x = _x(64, h, 11)
        with cd.MoeExecutor(path, threads=1) as eng:
            y_before = eng.moe_forward(layer, x)
        assert np.array_equal(pool.moe_forward(layer, x), y_before)

        _new_expert_files(tmp_path, h, inter)
        added = _cli("experts", "add", "--pool", "svc", "--layer", str(layer),
                     "--weights", str(tmp_path / "expert.safetensors"), "--router-row", str(tmp_path / "row.npy"))
        assert f"added expert {base}" in added.stdout
        assert len(pool.list_experts()[layer]) == base + 1
        with cd.MoeExecutor(path, threads=1) as eng:  # opens the persisted table, new expert included
            y_after = eng.moe_forward(layer, x)
            idx_after, _ = eng.route(layer, x)
        assert (idx_after == base).any()
        idx, _ = pool.route(layer, x)
        assert np.array_equal(idx, idx_after)
        assert np.array_equal(pool.moe_forward(layer, x), y_after)
        assert not np.array_equal(y_after, y_before)

        status = _cli("pool", "status", "--name", "svc", "--json")
        st = json.loads(status.stdout)
        assert st["experts"][str(layer)] == base + 1 and len(st["workers"]) == 2
        listed = _cli("experts", "list", "--pool", "svc")
        assert f"layer {layer}: {base + 1} experts" in listed.stdout

        _cli("experts", "remove", "--pool", "svc", "--layer", str(layer), "--expert", "0")
        with cd.MoeExecutor(path, threads=1) as eng:
            y_removed = eng.moe_forward(layer, x)
        idx, _ = pool.route(layer, x)
        assert not (idx == 0).any() and (idx == base).any()
        assert np.array_equal(pool.moe_forward(layer, x), y_removed)
        pool.shutdown()
    finally:
        stopped = _cli("pool", "stop", "--name", "svc", check=False)
    assert stopped.returncode == 0, stopped.stderr
    with pytest.raises(PoolError, match="no pool named 'svc'"):
        Pool.attach("svc")


def test_in_flight_batch_finishes_on_the_table_it_started_with(ray_address, fresh_model, tmp_path):
    path = fresh_model("olmoe")
    model = cd.open_model(path)
    layer, h, inter = model.moe_layers[0], model.config.hidden, model.config.inter
    x = _x(64, h, 13)
    with cd.MoeExecutor(path, threads=1) as eng:
        y_before = eng.moe_forward(layer, x)
    weights, row = _new_expert_files(tmp_path, h, inter, seed=9)
    with Pool(path, workers=2, threads_per_worker=1, micro_batch=8, worker_delay_s=0.1, name="inflight") as pool:
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("y", pool.moe_forward(layer, x)))
        t.start()
        time.sleep(0.3)
        other = Pool.attach("inflight")  # a second handle, as another process would hold
        new_id = other.add_expert(layer, weights, row)  # queued behind the running batch
        t.join(timeout=60)
        assert np.array_equal(out["y"], y_before)
        with cd.MoeExecutor(path, threads=1) as eng:
            y_after = eng.moe_forward(layer, x)
            assert (eng.route(layer, x)[0] == new_id).any()
        assert np.array_equal(pool.moe_forward(layer, x), y_after)


def test_balanced_routing_policy_in_the_pool_matches_the_same_policy_in_process(ray_address, tiny_models):
    from colibri_dist.routing.policy import BalancedRouting, forward_with_routing, route_balanced
    path = tiny_models["qwen2_moe"]
    model = cd.open_model(path)
    layer = model.moe_layers[-1]
    row = np.asarray(model.router(layer), np.float32)[0]
    x = (_x(48, 32, 21) + 2.0 * row / np.linalg.norm(row)).astype(np.float32)  # expert 0 runs hot
    with Pool(path, workers=2, threads_per_worker=1, routing_policy="balanced", micro_batch=16,
              balancer={"kind": "token-bucket", "window": 64, "threshold": 1.8}) as pool:
        with pytest.raises(InvalidArgument, match="NaN"):  # rejected before the policy sees it
            pool.moe_forward(layer, np.full((2, 32), np.inf, np.float32))
        y = pool.moe_forward(layer, x)
    with cd.MoeExecutor(path, threads=1) as eng:
        idx, w = route_balanced(BalancedRouting(64, 1.8), eng, layer, x)
        assert np.array_equal(y, forward_with_routing(eng, layer, x, idx, w))
        assert not np.array_equal(y, eng.moe_forward(layer, x))  # the policy really changed routing


def test_pool_start_without_a_ray_starts_a_loopback_head_and_stop_ends_it(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setenv("COLIBRI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = tmp_path / "auto.yaml"
    cfg.write_text(f"model: {tiny_models['olmoe']}\npool:\n  name: auto\n  workers: 1\n  threads_per_worker: 1\n")
    try:
        started = _cli("pool", "start", str(cfg))
        assert "started a loopback Ray head at 127.0.0.1:" in started.stdout
        state = json.loads((tmp_path / "state" / "pools" / "auto.json").read_text())
        assert state["address"].startswith("127.0.0.1:") and state["head_pid"]
    finally:
        stopped = _cli("pool", "stop", "--name", "auto", check=False)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the Ray head (pid {state['head_pid']})" in stopped.stdout
    from colibri_dist.pool.service import pid_alive
    assert not pid_alive(state["head_pid"])
    assert not (tmp_path / "state" / "pools" / "auto.json").exists()


def test_pool_damaged_expert_is_a_format_error_on_every_budget(ray_address, fresh_model):
    """Issue 15 defect 1 through the pool: workers check each tensor before first use too."""
    path = fresh_model("mixtral")
    with cd.open_model(path) as m:
        layer = m.moe_layers[0]
        offset, nbytes, _ = m.expert_location(layer, 0)
    with open(path, "r+b") as f:
        f.seek(offset + nbytes // 2)
        b = f.read(1)[0]
        f.seek(offset + nbytes // 2)
        f.write(bytes([b ^ 4]))
    x = _x(64, 32, 9)
    for cache_bytes in (None, 1):
        with Pool(path, workers=1, threads_per_worker=1, cache_bytes=cache_bytes) as pool:
            with pytest.raises(FormatError, match=f"layer {layer} expert 0 is damaged"):
                pool.moe_forward(layer, x)


def test_an_llm_on_a_pool_keys_its_prefix_cache_by_the_expert_set(ray_address, fresh_model, tmp_path):
    """Issue 31 defect 2: a hot-add through the pool left an LLM's prefix cache to reuse KV computed with the
    old experts (its answer equalled neither model). Pool.kv_identity is the expert set's version."""
    from colibri_dist.generate import SamplingParams
    path = fresh_model("olmoe")
    model = cd.open_model(path)
    layer, h, inter = model.moe_layers[0], model.config.hidden, model.config.inter
    prompt, sp = list(range(3, 43)), SamplingParams(max_tokens=3, temperature=0)
    with Pool(path, workers=2, threads_per_worker=1) as pool, cd.LLM(path, moe=pool, threads=1) as llm:
        assert llm.cache.prefix is not None                       # on by default: the pool says what KV depends on
        hits = lambda: llm.cache.prefix.stats()["hit_tokens"]     # noqa: E731
        llm.generate([prompt], sp)
        before = hits()
        llm.generate([prompt], sp)
        assert hits() > before                                    # the same experts: the prefix is reused
        weights, row = _new_expert_files(tmp_path, h, inter, seed=9)
        pool.add_expert(layer, weights, row)
        reused = hits()
        got = llm.generate([prompt], sp)[0].outputs[0].token_ids
        assert hits() == reused                                   # KV of the old experts is not reused
    with cd.LLM(path, threads=1, enable_prefix_caching=False) as ref:   # in process, the new expert set
        assert got == ref.generate([prompt], sp)[0].outputs[0].token_ids
