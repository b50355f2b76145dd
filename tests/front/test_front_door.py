"""Every entry point turns the same settings into the same engine and pool options (config.EngineArgs ->
front.open_llm / open_experts / open_pool), with the LLM and the Pool replaced by recorders: no model, no Ray.

The settings are one table (SETTINGS) spelled as Python keywords, `colibri generate`/`score`/`serve` flags,
ServeConfig keywords (serve(...)), a YAML job (generate and moe-layer kinds), a YAML service (`colibri pool
start`), a stress config and Ray Data engine_kwargs. A setting an entry point drops (a job losing
pool.offload_compression, as `colibri run` did) makes its recorded options differ from the others.
"""
import pytest

from colibri_dist.config import load_config
from colibri_dist.config.engine_args import EngineArgs
from colibri_dist.model import LLM
from colibri_dist.pool.config import PoolConfig

POOL_KEYS = ("workers", "threads_per_worker", "cache_bytes", "offload_dir", "compression", "policy", "w8a8")
ENGINE = dict(threads=1, w8a8=False, max_num_seqs=4, max_num_batched_tokens=256, kv_cache_bytes=1 << 20,
              max_seq_len=64)
STORE = dict(cache_bytes=2 << 20, offload_compression="zstd", policy="lfu")


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """Replace Pool and LLM by recorders; -> (model path, offload dir, the list of what they were given)."""
    import colibri_dist.model as model_module
    import colibri_dist.pool as pool_module
    seen = []

    class RecPool:
        def __init__(self, path, ray_address=None, **kw):
            cfg = PoolConfig(**kw)                               # the options a real Pool validates
            seen.append(("pool", {k: getattr(cfg, k) for k in POOL_KEYS}))
            self.w8a8 = cfg.w8a8

        def shutdown(self):
            pass

    class RecLLM(LLM):
        def __init__(self, model, moe=None, **kw):
            seen.append(("llm", dict(kw)))
            self.moe, self.executor, self._closed = moe, None, False
            self.decoder = type("Decoder", (), {})()

        def close(self):
            pass

    monkeypatch.setattr(pool_module, "Pool", RecPool)
    monkeypatch.setattr(model_module, "LLM", RecLLM)
    model = tmp_path / "m.colibri"
    model.write_bytes(b"x")
    return str(model), str(tmp_path / "spill"), seen


def _flags(spill):
    return ["--workers", "2", "--threads", "1", "--weights-only", "--kv-cache-bytes", "1MiB", "--max-seq-len", "64",
            "--cache-bytes", "2MiB", "--offload-dir", spill, "--offload-compression", "zstd", "--policy", "lfu"]


def _yaml(tmp_path, model, spill, kind="generate"):
    path = tmp_path / f"{kind}.yaml"
    path.write_text(f"model: {model}\n"
                    f"job: {{kind: {kind}, input: in.jsonl, threads: 1, w8a8: false, max_num_seqs: 4, "
                    f"batch_tokens: 256, kv_cache_bytes: 1MiB, max_seq_len: 64}}\n"
                    f"pool: {{workers: 2, threads_per_worker: 1, cache_bytes: 2MiB, offload_dir: {spill}, offload_compression: zstd, "
                    f"policy: lfu, w8a8: false}}\n")
    return load_config(str(path))


def _entry_points(tmp_path, model, spill):
    """name -> a call that opens the model (or its pool) the way that entry point does."""
    from colibri_dist import front
    from colibri_dist.cli import build_parser
    from colibri_dist.cli import generate as cli_generate
    from colibri_dist.cli.serve import config_from_args
    from colibri_dist.jobs.generation.batch import BatchProcessor
    from colibri_dist.jobs.generation.llm import open_job_llm
    from colibri_dist.jobs.run.executors import open_executor
    from colibri_dist.serve.config import ServeConfig
    from colibri_dist.serve.launch import open_llm as serve_open
    parse = build_parser().parse_args
    serve_kw = dict(model=model, workers=2, threads=1, w8a8=False, max_num_seqs=4, max_num_batched_tokens=256,
                    llm_kwargs=dict(kv_cache_bytes=1 << 20, max_seq_len=64, offload_dir=spill, **STORE))
    return {
        "python": lambda: front.open_llm(EngineArgs(model=model, workers=2, offload_dir=spill, **ENGINE, **STORE)),
        "generate": lambda: cli_generate.open_llm(parse(["generate", model, "hi", *_flags(spill)])),
        "score": lambda: cli_generate.open_llm(parse(["score", model, "f.txt", *_flags(spill)])),
        "serve flags": lambda: serve_open(config_from_args(parse(["serve", model, *_flags(spill), "--max-num-seqs",
                                                                  "4", "--max-num-batched-tokens", "256"]))),
        "serve keywords": lambda: serve_open(ServeConfig(**serve_kw)),
        "job generate": lambda: open_job_llm(_yaml(tmp_path, model, spill)),
        "job moe-layer": lambda: open_executor(_yaml(tmp_path, model, spill, "moe-layer"), model, spill),
        "ray data": lambda: BatchProcessor(model, threads=1, engine_kwargs=dict(
            workers=2, w8a8=False, max_num_seqs=4, max_num_batched_tokens=256, kv_cache_bytes=1 << 20,
            max_seq_len=64, offload_dir=spill, **STORE)),
    }


def test_every_entry_point_gives_the_pool_and_the_engine_the_same_options(recorded, tmp_path):
    model, spill, seen = recorded
    pools, llms = {}, {}
    for name, open_it in _entry_points(tmp_path, model, spill).items():
        seen.clear()
        open_it()
        got = dict(seen)
        pools[name] = got["pool"]
        if "llm" in got:
            llms[name] = got["llm"]
    want_pool = dict(workers=2, threads_per_worker=1, cache_bytes=2 << 20, offload_dir=spill, compression="zstd",
                     policy="lfu", w8a8=False)
    assert pools == dict.fromkeys(pools, want_pool)
    first = llms["python"]
    assert {k: first[k] for k in ENGINE} == ENGINE and "cache_bytes" not in first   # the store is the pool's
    for name, kw in llms.items():            # one prompt: generate and score keep the batch defaults
        one = dict(first, max_num_seqs=64, max_num_batched_tokens=2048) if name in ("generate", "score") else first
        assert kw == one, name
    assert set(llms) == set(pools) - {"job moe-layer"}


def test_the_service_and_stress_pools_take_the_pool_section_whole(recorded, tmp_path):
    from colibri_dist.config.engine_args import of_service
    from colibri_dist.front import open_pool
    from colibri_dist.stress.reference import stress_pool_args
    model, spill, seen = recorded
    cfg = _yaml(tmp_path, model, spill)
    open_pool(of_service(cfg))
    open_pool(stress_pool_args(cfg, model, 3 << 20, spill, None, 5))
    (_, service), (_, stress) = seen
    assert service == dict(workers=2, threads_per_worker=1, cache_bytes=2 << 20, offload_dir=spill,
                           compression="zstd", policy="lfu", w8a8=False)
    assert stress == dict(service, cache_bytes=3 << 20)


def test_in_process_the_store_settings_reach_the_llms_engine(recorded, tmp_path):
    from colibri_dist import front
    model, spill, seen = recorded
    front.open_llm(EngineArgs(model=model, offload_dir=spill, **ENGINE, **STORE))
    (kind, kw), = seen
    assert kind == "llm" and (kw["cache_bytes"], kw["offload_compression"], kw["policy"]) == (2 << 20, "zstd", "lfu")


def test_placements_that_exclude_each_other_are_refused_naming_the_setting():
    from colibri_dist.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match="workers and pool exclude each other") as info:
        EngineArgs(model="m", workers=2, pool="svc")
    assert info.value.parameter == "pool"
    with pytest.raises(InvalidArgument, match="runners 2 needs the Ray pool") as info:
        EngineArgs(model="m", runners=2)
    assert info.value.parameter == "runners"
    with pytest.raises(InvalidArgument, match=r"pool_options \['compression'\] are EngineArgs fields"):
        EngineArgs(model="m", workers=1, pool_options={"compression": "zstd"})
