"""colibri_dist.ray_data: a real ray.data.from_items pipeline on a local Ray (loopback), one Ray per module.

Every output row must equal what the in-process LLM gives for the same row (the same columns as the
jobs), whatever the batch size and the number of actors (a fixed pool or an autoscaling (min, max) range);
a bad row raises by default, and with should_continue_on_error=True gets `error` while the pipeline goes on.
Many one-row blocks run in a few tasks, and row functions asking for CPUs of a 2-CPU Ray do not deadlock.
"""
import json
import os
import threading

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pandas")
pytest.importorskip("tokenizers")
ray = pytest.importorskip("ray")

from colibri_dist.demos import llm as demo_llm  # noqa: E402


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    import colibri_dist as cd
    root = tmp_path_factory.mktemp("ray-data")
    demo_llm.write_checkpoint(str(root / "hf"), layers=2, n_experts=4)
    model = cd.convert(str(root / "hf"), str(root / "m.colibri"), progress=False)
    rows = demo_llm.prompts(12, max_tokens=5)
    from colibri_dist.testing.pytest_ray import connect_local
    connect_local()                    # a local Ray on loopback for the whole module (retried under load)
    yield model, rows
    ray.shutdown()


def _expected(model, rows, kind="generate", **job):
    from colibri_dist.jobs.generation.batch import BatchProcessor
    runner = BatchProcessor(model, kind=kind, **job)
    try:
        return runner.run([dict(r) for r in rows])
    finally:
        runner.close()


def test_generate_pipeline_equals_in_process_and_reports_accuracy(demo):
    import ray.data

    from colibri_dist.ray_data import ColibriProcessorConfig, build_processor
    model, rows = demo
    items = [{"question": r["prompt"], "id": r["id"], "task": r["task"], "expected": r["expected"]} for r in rows]
    items.append({"question": "", "id": "empty", "task": "numbers", "expected": ""})   # a bad row
    config = ColibriProcessorConfig(model_source=model, concurrency=2, batch_size=5, should_continue_on_error=True,
                                    sampling_params={"max_tokens": 5}, engine_kwargs={"max_num_seqs": 4})
    processor = build_processor(config, preprocess=lambda row: {**row, "prompt": row["question"]},
                                postprocess=lambda row: {"answer": row["generated_text"], **row})
    out = sorted(processor(ray.data.from_items(items)).take_all(), key=lambda r: r["id"])
    assert [r["id"] for r in out] == sorted(r["id"] for r in items)
    bad = next(r for r in out if r["id"] == "empty")
    assert bad["error"] and "empty" in bad["error"] and bad["generated_text"] is None
    good = [r for r in out if r["id"] != "empty"]
    want = {w["id"]: w for w in _expected(model, [{"id": r["id"], "prompt": r["prompt"]} for r in rows],
                                          sampling_params={"max_tokens": 5})}
    for r in good:
        w = want[r["id"]]
        for col in ("generated_text", "generated_tokens", "num_input_tokens", "num_generated_tokens", "finish_reason"):
            assert r[col] == w[col], (r["id"], col)
        assert r["error"] is None and r["answer"] == r["generated_text"] and r["task"]      # columns carried over
    by_id = {r["id"]: r for r in good}
    acc = demo_llm.task_accuracy(rows, [by_id[r["id"]]["generated_text"] for r in rows])
    assert acc["accuracy"] == 1.0


def test_score_pipeline_and_per_row_sampling_params(demo):
    import ray.data

    from colibri_dist.ray_data import ColibriProcessorConfig, build_processor
    model, rows = demo
    items = [{"prompt": r["prompt"], "id": r["id"]} for r in rows[:6]]
    scored = build_processor(ColibriProcessorConfig(model_source=model, kind="score", batch_size=4))(
        ray.data.from_items(items)).take_all()
    want = {w["id"]: w for w in _expected(model, items, kind="score")}
    assert len(scored) == 6
    for r in scored:
        assert r["prompt_logprobs"] == want[r["id"]]["prompt_logprobs"]
        assert r["total_logprob"] == want[r["id"]]["total_logprob"] and r["num_tokens"] == want[r["id"]]["num_tokens"]
    # per-row sampling params over the defaults, seeded sampling, ids absent: same bits as in-process
    items = [{"prompt": r["prompt"], "sampling_params": {"max_tokens": 2 + i % 3, "temperature": 0.8}}
             for i, r in enumerate(rows[:6])]
    items.append({"prompt": rows[0]["prompt"], "sampling_params": {"no_such_key": 1}})
    got = build_processor(ColibriProcessorConfig(model_source=model, batch_size=3, seed=7, concurrency=(1, 2),
                                                 should_continue_on_error=True))(
        ray.data.from_items(items)).take_all()
    want = _expected(model, items, seed=7)
    want_by = {_key(i["prompt"], i["sampling_params"]): w for i, w in zip(items, want)}
    assert len(got) == len(want_by) == 7
    for g in got:
        w = want_by[_key(g["prompt"], g["sampling_params"])]
        assert g["generated_tokens"] == w.get("generated_tokens") and g["error"] == w.get("error")
    assert sum("no_such_key" in (g["error"] or "") for g in got) == 1
    assert len({tuple(g["generated_tokens"] or ()) for g in got}) > 2          # sampling really ran


def _key(prompt, params):
    """A row's identity: prompt + the sampling keys it set (Arrow fills the other rows' keys with None)."""
    return json.dumps([prompt, {k: v for k, v in (params or {}).items() if v is not None}], sort_keys=True)


def test_a_failed_row_raises_by_default(demo):
    import ray.data

    from colibri_dist.ray_data import ColibriProcessorConfig, build_processor
    model, rows = demo
    items = [{"prompt": rows[0]["prompt"], "id": "fine"}, {"prompt": "", "id": "empty"}]
    processor = build_processor(ColibriProcessorConfig(model_source=model, sampling_params={"max_tokens": 2}))
    with pytest.raises(Exception, match=r"row 'empty': .*empty.*should_continue_on_error=True"):
        processor(ray.data.from_items(items)).take_all()


def test_many_small_blocks_and_half_cpu_row_functions_on_two_cpus(demo):
    """40 one-row blocks: the row functions run in at most `concurrency` tasks (not a process per block),
    and num_cpus=0.5 for pre- and postprocess beside 2 actors on a 2-CPU Ray finishes (the actors'
    default reservation shrinks to fit)."""
    import ray.data

    from colibri_dist.ray_data import ColibriProcessorConfig, build_processor
    model, rows = demo
    assert ray.cluster_resources()["CPU"] == os.cpu_count() == 2
    items = [{"question": demo_llm.prompts(40, max_tokens=2)[i]["prompt"], "id": str(i)} for i in range(40)]
    config = ColibriProcessorConfig(model_source=model, concurrency=2, sampling_params={"max_tokens": 2})
    processor = build_processor(config, preprocess=lambda row: {**row, "prompt": row["question"],
                                                                "pre_pid": os.getpid()},
                                postprocess=lambda row: {**row, "post_pid": os.getpid()},
                                preprocess_map_kwargs={"num_cpus": 0.5}, postprocess_map_kwargs={"num_cpus": 0.5})
    assert processor.actor_cpus() == 0.5
    done = {}
    worker = threading.Thread(target=lambda: done.update(
        out=processor(ray.data.from_items(items, override_num_blocks=40)).take_all()), daemon=True)
    worker.start()
    worker.join(timeout=240)
    assert "out" in done, "the pipeline did not finish in 240 s (deadlocked?)"
    out = done["out"]
    assert sorted(r["id"] for r in out) == sorted(r["id"] for r in items)
    assert all(r["error"] is None and r["generated_tokens"] for r in out)
    assert len({r["pre_pid"] for r in out}) <= 2 and len({r["post_pid"] for r in out}) <= 2


def test_read_json_input_with_as_many_actors_as_cpus_finishes(demo, tmp_path):
    """A read_json task asks 1 CPU: 2 actors on a 2-CPU Ray leave room for it (0.5 CPU each) instead of
    holding both CPUs while the read waits forever."""
    import ray.data

    from colibri_dist.ray_data import ColibriProcessorConfig, build_processor
    model, rows = demo
    assert ray.cluster_resources()["CPU"] == os.cpu_count() == 2
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    processor = build_processor(ColibriProcessorConfig(model_source=model, concurrency=2, batch_size=3))
    ds = ray.data.read_json(str(src))
    assert processor.actor_cpus(ds) == 0.5
    done = {}
    worker = threading.Thread(target=lambda: done.update(out=processor(ds).take_all()), daemon=True)
    worker.start()
    worker.join(timeout=240)
    assert "out" in done, "the read_json pipeline did not finish in 240 s (deadlocked?)"
    assert sorted(r["id"] for r in done["out"]) == sorted(r["id"] for r in rows[:6])


def test_stages_before_the_actors_count(demo, tmp_path, monkeypatch):
    """An explicit num_cpus that leaves no CPU for the read task fails at once, naming what to change."""
    import ray.data

    from colibri_dist.errors import InvalidArgument
    from colibri_dist.ray_data import ColibriProcessorConfig, build_processor
    src = tmp_path / "in.jsonl"
    src.write_text('{"prompt": "a"}\n')
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    fixed = build_processor(ColibriProcessorConfig(model_source="m", concurrency=2, num_cpus=1))
    with pytest.raises(InvalidArgument, match=r"2 actors x num_cpus=1 plus 0 CPUs .* plus 1 for the stages "
                                              r"before them .* ask 3 CPUs, more than the cluster's 2 CPUs.*"
                                              r"num_cpus or concurrency.*read_json\(..., num_cpus=0\)"):
        fixed.actor_cpus(ray.data.read_json(str(src)))
    free_read = ray.data.read_json(str(src), num_cpus=0)
    assert fixed.actor_cpus(free_read) == 1.0
    assert fixed.actor_cpus(ray.data.from_items([{"prompt": "a"}])) == 1.0


def test_config_is_checked(monkeypatch):
    from colibri_dist.errors import InvalidArgument
    from colibri_dist.ray_data import ColibriProcessorConfig, build_processor
    with pytest.raises(InvalidArgument, match="kind: expected generate | score"):
        ColibriProcessorConfig(model_source="m", kind="embed")
    for bad in (0, (0, 2), (3, 2), (1, 2, 3), "2", True):
        with pytest.raises(InvalidArgument, match="concurrency: expected an integer >= 1 or a \\(min, max\\) pair"):
            ColibriProcessorConfig(model_source="m", concurrency=bad)
    assert ColibriProcessorConfig(model_source="m", concurrency=[1, 3]).max_actors == 3
    with pytest.raises(InvalidArgument, match="should_continue_on_error: expected True or False"):
        ColibriProcessorConfig(model_source="m", should_continue_on_error="yes")
    with pytest.raises(InvalidArgument, match="num_cpus: expected a number >= 0"):
        ColibriProcessorConfig(model_source="m", num_cpus=-1)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    too_big = build_processor(ColibriProcessorConfig(model_source="m", concurrency=2, num_cpus=1),
                              preprocess=dict, preprocess_map_kwargs={"num_cpus": 0.5})
    with pytest.raises(InvalidArgument, match="2 actors x num_cpus=1 plus 0.5 CPUs .* cluster's 2 CPUs"):
        too_big.actor_cpus()
    shrunk = build_processor(ColibriProcessorConfig(model_source="m", concurrency=(1, 3)), preprocess=dict,
                             postprocess=dict, preprocess_map_kwargs={"num_cpus": 0.5},
                             postprocess_map_kwargs={"num_cpus": 0.25})
    assert shrunk.actor_cpus() == 0.41                       # (2 - 0.75) / 3 actors, rounded down
    assert build_processor(ColibriProcessorConfig(model_source="m", concurrency=2)).actor_cpus() == 1.0


def test_row_function_batches_keep_every_key_and_failed_rows_raise_by_default():
    import pyarrow as pa

    from colibri_dist.errors import InvalidArgument
    from colibri_dist.pool.ray_data import ColibriPredictor, ColibriProcessorConfig, RowFn
    out = RowFn(lambda r: {**r, "b": 1} if r["a"] == 1 else {**r, "c": "x"})(pa.table({"a": [1, 2]}))
    assert out.to_pylist() == [{"a": 1, "b": 1, "c": None}, {"a": 2, "b": None, "c": "x"}]

    class Runner:
        def run(self, rows):
            return [{"id": r["id"], "error": "empty prompt" if not r["prompt"] else None} for r in rows]
    config = ColibriProcessorConfig(model_source="m", numa={"enabled": False})
    pred = ColibriPredictor(config, lambda c, n: Runner())
    assert pred(pa.table({"id": ["a"], "prompt": ["x"]})).column("error").to_pylist() == [None]
    with pytest.raises(InvalidArgument, match="row 'b': empty prompt .*should_continue_on_error=True"):
        pred(pa.table({"id": ["a", "b"], "prompt": ["x", ""]}))


def test_predictor_output_types_do_not_depend_on_the_batch():
    """A batch of only bad rows has the same Arrow schema as a good one (no null-typed columns)."""
    import pyarrow as pa

    from colibri_dist.pool.ray_data import ColibriPredictor, ColibriProcessorConfig
    threads = []

    class Runner:
        def run(self, rows):
            return [{"id": r.get("id"), "error": "empty prompt"} for r in rows]

    def factory(config, n):
        threads.append(n)
        return Runner()
    config = ColibriProcessorConfig(model_source="m", numa={"enabled": False}, threads=3,
                                    should_continue_on_error=True)
    pred = ColibriPredictor(config, factory)
    out = pred(pa.table({"id": ["a", "b"], "prompt": ["", ""], "extra": [1, 2]}))
    assert threads == [3] and pred.numa_report is None
    assert out.column("extra").to_pylist() == [1, 2] and out.column("error").to_pylist() == ["empty prompt"] * 2
    assert out.schema.field("generated_tokens").type == pa.list_(pa.int64())
    assert out.schema.field("num_generated_tokens").type == pa.int64()
    assert out.column("generated_text").to_pylist() == [None, None]


def test_structured_outputs_for_the_whole_dataset(demo, tmp_path):
    """Issue 33: one schema for the dataset (config.sampling_params): every row validates and equals the
    in-process runner's, bit for bit."""
    import ray.data

    from colibri_dist.ray_data import ColibriProcessorConfig, build_processor
    from colibri_dist.testing import random_llm
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("llguidance")
    model = random_llm.build(tmp_path / "rand.colibri")
    schema = {"type": "object", "properties": {"k": {"enum": ["a", "b"]}, "n": {"type": "integer", "minimum": 0,
                                                                                 "maximum": 9}},
              "required": ["k", "n"], "additionalProperties": False}
    sp = {"max_tokens": 40, "temperature": 1.0, "structured_outputs": {"json": schema, "disable_any_whitespace": True}}
    items = [{"prompt": f"row {i}", "id": i} for i in range(8)]
    got = build_processor(ColibriProcessorConfig(model_source=model, batch_size=3, sampling_params=sp))(
        ray.data.from_items(items)).take_all()
    want = {w["id"]: w for w in _expected(model, items, sampling_params=sp)}
    assert len(got) == 8
    for g in got:
        assert g["generated_tokens"] == want[g["id"]]["generated_tokens"] and g["error"] is None
        jsonschema.validate(json.loads(g["generated_text"]), schema)
