"""The real stack in-process (no Ray): demo generation + converter + MoeExecutor, against the numpy reference.

Tolerance of the reference comparison: the job runs float32 (native kernels on
int8 experts, float32 numpy for the dense parts); the reference decodes the
same int8 experts with format.quantize.dequantize and runs in float64. Class
probabilities must agree to 2e-5 absolute, and the argmax must be identical
for every token whose top-2 reference margin exceeds 1e-4 (ties closer than
that may legitimately flip under float32 rounding; the test also checks that
such near-ties are rare, under 0.5% of tokens).
"""
import json
import os

import numpy as np
import pytest

from colibri_dist.config import load_config
from colibri_dist.demos.classifier import ensure_demo
from colibri_dist.demos.classifier_reference import reference_probs
from colibri_dist.jobs.pipeline import run_job
from jobs_helpers import output_rows, read_jsonl

TINY = """\
job: {{kind: token-classification, batch_tokens: {batch}}}
demo:
  cache_dir: {cache}
  vocab_size: 96
  hidden: 32
  inter: 64
  layers: 3
  experts: 8
  top_k: 2
  dataset: {{shards: 3, rows_per_shard: 16, seq_len: 12}}
pool: {{workers: 0, cache_bytes: {cache_bytes}}}
report: {{progress: none, summary: false, html: {html}}}
"""


@pytest.fixture(scope="module")
def demo_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")

    def config(batch=64, cache_bytes="null", html="false", name="job.yaml"):
        path = root / name
        path.write_text(TINY.format(batch=batch, cache=root / "cache", cache_bytes=cache_bytes, html=html))
        return load_config(str(path))
    cfg = config()
    art = ensure_demo(cfg.demo, log=lambda _: None)
    return root, config, art


def all_input_rows(art):
    return [r for n in sorted(os.listdir(art.data_dir)) for r in read_jsonl(os.path.join(art.data_dir, n))]


def test_demo_generation_is_cached_and_deterministic(demo_env, tmp_path):
    root, config, art = demo_env
    again = ensure_demo(config().demo, log=lambda _: pytest.fail("rebuilt a cached demo"))
    assert again == art
    cfg = config()
    cfg.demo.cache_dir = str(tmp_path / "other")
    fresh = ensure_demo(cfg.demo, log=lambda _: None)
    for name in ("model.safetensors", "config.json"):
        with open(os.path.join(art.hf_dir, name), "rb") as a, open(os.path.join(fresh.hf_dir, name), "rb") as b:
            assert a.read() == b.read()
    assert os.listdir(art.data_dir) == os.listdir(fresh.data_dir)
    assert json.load(open(os.path.join(art.hf_dir, "config.json")))["architectures"] == ["MixtralForCausalLM"]


def test_classifier_matches_numpy_reference(demo_env, tmp_path):
    """The exact-weights mode (job.w8a8: false) against numpy on the decoded int8 weights; the default
    (w8a8: int8 activations) stays within its quantization error of it and picks the same clear labels."""
    root, config, art = demo_env
    exact = config()
    exact.job.w8a8 = False
    rep = run_job(exact, out_dir=str(tmp_path / "exact"))
    run_job(config(), out_dir=str(tmp_path / "out"))
    inputs = all_input_rows(art)
    got = np.concatenate([np.asarray(r["probs"]) for r in output_rows(tmp_path / "exact")])
    ids = np.concatenate([r["input_ids"] for r in inputs])
    ref = reference_probs(art.model, ids)
    np.testing.assert_allclose(got, ref, atol=2e-5, rtol=0)
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-4
    assert clear.mean() > 0.995
    fast = np.concatenate([np.asarray(r["probs"]) for r in output_rows(tmp_path / "out")])
    assert not np.array_equal(fast, got)              # the default really is the other arithmetic
    np.testing.assert_allclose(fast, ref, atol=2e-2, rtol=0)
    wide = (top2[:, 1] - top2[:, 0]) > 0.05
    assert wide.mean() > 0.5 and (fast.argmax(1) == ref.argmax(1))[wide].all()
    assert np.array_equal(got.argmax(1)[clear], ref.argmax(1)[clear])
    labels = np.concatenate([r["labels"] for r in inputs])
    assert rep["accuracy"]["correct"] == int(np.sum(got.argmax(1) == labels))
    assert rep["accuracy"]["accuracy"] > 0.6     # the labelling is learnable; chance is 0.2


def test_outputs_bit_identical_across_batch_size_and_cache_budget(demo_env, tmp_path):
    root, config, art = demo_env
    run_job(config(batch=64), out_dir=str(tmp_path / "a"))
    rep = run_job(config(batch=7, cache_bytes="16KiB", name="small.yaml"), out_dir=str(tmp_path / "b"))
    assert rep["cache"]["misses"] > 0 and rep["cache"]["evictions"] > 0   # the offload path ran
    for name in sorted(os.listdir(tmp_path / "a")):
        if name.endswith(".jsonl"):
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_report_fields_present_and_consistent(demo_env, tmp_path):
    root, config, art = demo_env
    out = tmp_path / "out"
    rep = run_job(config(cache_bytes="24KiB", html="true"), out_dir=str(out))
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(rep))
    inputs = all_input_rows(art)
    assert rep["rows"] == len(inputs)
    assert rep["tokens"] == rep["tokens_this_run"] == sum(len(r["input_ids"]) for r in inputs)
    c = rep["cache"]
    assert set(c) >= {"hits", "misses", "hit_rate", "evictions", "bytes_loaded"}
    assert c["hits"] + c["misses"] > 0 and c["hit_rate"] == c["hits"] / (c["hits"] + c["misses"])
    lat = rep["batch_latency_ms"]
    assert lat["batches"] == 3 * -(-16 * 12 // 64) and 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
    assert rep["tokens_per_s"] > 0 and rep["load_imbalance"] == 1.0
    assert [set(w) for w in rep["workers"]] == [{"id", "tokens", "experts", "cpus", "node"}]
    assert rep["workers"][0]["tokens"] == rep["tokens"] * 3          # token rows through 3 MoE layers
    assert rep["faults"] == {"retries": 0}
    heat = rep["expert_heat"]
    assert sorted(heat) == ["0", "1", "2"] and all(sum(h) == rep["tokens"] * 2 for h in heat.values())
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3


def test_moe_layer_job_equals_engine_layers_in_sequence(demo_env, tmp_path):
    import colibri_dist as cd
    root, config, art = demo_env
    data = tmp_path / "states"
    data.mkdir()
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((n, 32)).astype(np.float32) for n in (40, 9)]
    for i, a in enumerate(arrays):
        np.save(data / f"h{i}.npy", a)
    job = tmp_path / "moe.yaml"
    job.write_text(f"job: {{kind: moe-layer, input: {data}, layers: [2, 0], batch_tokens: 16, shard_rows: 32}}\n"
                   f"model: {art.model}\npool: {{workers: 0}}\nreport: {{progress: none, summary: false, html: false}}\n")
    rep = run_job(load_config(str(job)), out_dir=str(tmp_path / "out"))
    assert rep["tokens"] == rep["rows"] == 49 and rep["shards"]["total"] == 3
    with cd.MoeExecutor(art.model) as eng:
        want = [eng.moe_forward(0, eng.moe_forward(2, a)) for a in arrays]
    got0 = np.concatenate([np.load(tmp_path / "out" / f"h0.part{i:05d}.npy") for i in (0, 1)])
    assert np.array_equal(got0, want[0])
    assert np.array_equal(np.load(tmp_path / "out" / "h1.part00000.npy"), want[1])


def test_moe_layer_job_rejects_unknown_layer_and_bad_shapes(demo_env, tmp_path):
    from colibri_dist.errors import ConfigError, FormatError
    root, config, art = demo_env
    np.save(tmp_path / "bad.npy", np.zeros((4, 7), np.float32))
    job = tmp_path / "moe.yaml"
    base = f"model: {art.model}\npool: {{workers: 0}}\nreport: {{progress: none, summary: false}}\n"
    job.write_text(f"job: {{kind: moe-layer, input: {tmp_path / 'bad.npy'}, layers: 9}}\n" + base)
    with pytest.raises(ConfigError, match=r"job.layers: layer 9 is not a MoE layer .*\[0, 1, 2\]"):
        run_job(load_config(str(job)), out_dir=str(tmp_path / "out"))
    job.write_text(f"job: {{kind: moe-layer, input: {tmp_path / 'bad.npy'}}}\n" + base)
    with pytest.raises(FormatError, match=r"bad.npy: expected hidden states of shape \[rows, 32\], got \[4, 7\]"):
        run_job(load_config(str(job)), out_dir=str(tmp_path / "out2"))


def test_text_input_uses_the_demo_models_own_tokenizer(demo_env, tmp_path):
    pytest.importorskip("tokenizers")
    root, config, art = demo_env
    ids_cfg = config()
    run_job(ids_cfg, out_dir=str(tmp_path / "ids"))
    text_cfg = config(name="text.yaml")
    text_cfg.job.input_format = "text"          # the demo rows carry both; read only the text
    run_job(text_cfg, out_dir=str(tmp_path / "text"))
    assert output_rows(tmp_path / "text") == output_rows(tmp_path / "ids")

# ------------------------------------------------------------------ the demo LLM (`colibri run` default)

LLM_DEMO = """\
job: {{kind: generate, batch_tokens: {batch}, max_num_seqs: {seqs}}}
demo_llm: {{cache_dir: {cache}, layers: 2, experts: 8, prompts: 24, shards: 3, max_tokens: 6}}
pool: {{workers: 0, cache_bytes: {cache_bytes}}}
report: {{progress: none, summary: false}}
"""


def _llm_demo_config(root, name, batch=256, seqs=32, cache_bytes="null"):
    path = root / name
    path.write_text(LLM_DEMO.format(batch=batch, seqs=seqs, cache=root / "cache", cache_bytes=cache_bytes))
    return load_config(str(path))


def test_demo_llm_is_cached_deterministic_and_converted_int8(tmp_path):
    from colibri_dist.format.reader import open_model
    from colibri_dist.demos.llm_cache import ensure_demo_llm
    cfg = _llm_demo_config(tmp_path, "a.yaml")
    art = ensure_demo_llm(cfg.demo_llm, log=lambda _: None)
    assert ensure_demo_llm(cfg.demo_llm, log=lambda _: pytest.fail("rebuilt a cached demo")) == art
    (tmp_path / "x").mkdir()
    other = _llm_demo_config(tmp_path / "x", "b.yaml")
    fresh = ensure_demo_llm(other.demo_llm, log=lambda _: None)
    assert fresh.root != art.root
    for rel in ("hf/model.safetensors", "hf/tokenizer.json", "prompts/shard-00000.jsonl"):
        assert (open(os.path.join(art.root, rel), "rb").read() == open(os.path.join(fresh.root, rel), "rb").read()), rel
    with open_model(art.model) as m:
        assert m.config.scheme == "int8" and m.config.n_experts == 8 and len(m.moe_layers) == 2
    rows = [r for n in sorted(os.listdir(art.data_dir)) for r in read_jsonl(os.path.join(art.data_dir, n))]
    assert len(rows) == 24 and {r["task"] for r in rows} == {"numbers", "letters", "week", "months"}


def test_demo_llm_job_reports_task_accuracy_and_is_invariant(tmp_path):
    rep = run_job(_llm_demo_config(tmp_path, "a.yaml"), out_dir=str(tmp_path / "a"))
    assert rep["rows"] == 24 and rep["errors"] == 0 and rep["complete"]
    acc = rep["task_accuracy"]
    assert acc["accuracy"] == 1.0 and acc["rows"] == 24 and set(acc["by_task"].values()) == {1.0}
    assert rep["this_run"]["throughput"]["decode_tokens"] > 0        # LLM.generate passes on_step through
    assert rep["this_run"]["cache"]["hits"] + rep["this_run"]["cache"]["misses"] > 0
    html = (tmp_path / "a" / "report.html").read_text()
    assert "task accuracy (demo)" in html and "100.0% over 24 prompts" in html
    for title in ("Tokens/s over time", "Time to first token", "Request latency", "Sequences in flight",
                  "KV blocks used", "Expert heat", "Cache hit rate", "Per-worker load"):
        assert f"<h2>{title}</h2><img" in html, title
    assert html.count("data:image/png;base64,") == 8
    run = rep["this_run"]
    heat = run["expert_heat"]
    fed = run["throughput"]["prefill_tokens"] + run["throughput"]["decode_tokens"]
    assert sorted(heat) == ["0", "1"] and all(sum(h) == 2 * fed for h in heat.values())    # top-2, every token
    assert run["kv_cache"]["blocks"] > 0 and 0 < run["kv_cache"]["peak_used_blocks"] <= run["kv_cache"]["blocks"]
    assert run["workers"][0]["tokens"] > 0 and run["samples"]
    small = run_job(_llm_demo_config(tmp_path, "b.yaml", batch=3, seqs=2, cache_bytes="40KiB"),
                    out_dir=str(tmp_path / "b"))
    assert small["this_run"]["cache"]["evictions"] > 0               # the offload path ran
    names = sorted(n for n in os.listdir(tmp_path / "a") if n.endswith(".jsonl"))
    assert len(names) == 3
    for n in names:
        assert (tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes()
    again = run_job(_llm_demo_config(tmp_path, "a.yaml"), out_dir=str(tmp_path / "a"))    # all done: the report
    assert again["shards"] == rep["shards"] and again["task_accuracy"] == acc                # is kept as it was
