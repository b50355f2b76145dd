"""Resume of generate/score jobs: every setting that can change a row's bytes is in the signature.

A "kill" is a fake LLM that raises on its 2nd call (the first group of shards is written); the resume then
runs with one setting changed and must be refused naming it, while executor settings resume to the same
bytes. The model is a real (tiny, constructed) container, so its content identity and the hot-added expert
set are read from the file; generation itself runs on the fake LLM (fast, no native model load).
"""
import json
import os
import shutil

import numpy as np
import pytest

from colibri_dist.config import load_config
from colibri_dist.errors import InvalidArgument
from colibri_dist.jobs.pipeline import run_job

from gen_fake_llm import FakeLLM

ROWS = [{"id": f"r{i}", "prompt": "one two three " * (i % 3 + 1)} for i in range(8)]


@pytest.fixture(scope="module")
def demo_models(tmp_path_factory):
    from colibri_dist.config import DemoLLMConfig, parse_section
    from colibri_dist.demos.llm_cache import ensure_demo_llm
    root = tmp_path_factory.mktemp("demo")
    arts = [ensure_demo_llm(parse_section(DemoLLMConfig, {"layers": 2, "experts": 4, "prompts": 4, "shards": 1,
                                                           "seed": seed, "cache_dir": str(root)}), log=lambda _: None)
            for seed in (0, 1)]
    return [a.model for a in arts]


def _setup(tmp_path, demo_models):
    model = tmp_path / "m.colibri"
    shutil.copyfile(demo_models[0], model)
    os.makedirs(tmp_path / "data")
    with open(tmp_path / "data" / "in.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in ROWS)
    return str(model)


def _cfg(tmp_path, job="", top=""):
    p = tmp_path / "job.yaml"
    p.write_text(f"job:\n  kind: generate\n  input: data\n  shard_rows: 2\n  max_num_seqs: 1\n"
                 f"  sampling_params: {{max_tokens: 4}}\n{job}model: m.colibri\n"
                 f"pool: {{workers: 0}}\nreport: {{progress: none, html: false, summary: false}}\n{top}")
    return load_config(str(p))


def _killed_run(tmp_path, out):
    with pytest.raises(RuntimeError, match="killed"):
        run_job(_cfg(tmp_path), out_dir=str(out), llm_factory=lambda c: FakeLLM(fail_on_call=2))
    written = [n for n in os.listdir(out) if n.endswith(".jsonl")]
    assert 0 < len(written) < 4                       # a partial job: some shards, not all


def _hot_add(model):
    from colibri_dist.moe_executor import MoeExecutor
    with MoeExecutor(model) as eng:
        c, rng = eng.config, np.random.default_rng(0)
        w = {"gate": rng.standard_normal((c.inter, c.hidden)).astype(np.float32),
             "up": rng.standard_normal((c.inter, c.hidden)).astype(np.float32),
             "down": rng.standard_normal((c.hidden, c.inter)).astype(np.float32)}
        eng.add_expert(eng.model.moe_layers[0], w, rng.standard_normal(c.hidden).astype(np.float32))


def _replace_container(model, other):
    st = os.stat(model)
    shutil.copyfile(other, model)                     # same size, then the old mtime back: only content differs
    assert os.path.getsize(model) == st.st_size
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))


CHANGES = [
    ("routing.policy", "", "routing: {policy: balanced}\n"),
    ("job.sampling_params", "", ""),
    ("job.seed", "  seed: 9\n", ""),
    ("job.w8a8", "  w8a8: false\n", ""),
    ("job.kv_cache_dtype", "  kv_cache_dtype: f16\n", ""),
    ("job.kv_cache_bytes", "  kv_cache_bytes: 1MiB\n", ""),
    ("job.max_seq_len", "  max_seq_len: 32\n", ""),
    ("job.chat_template_timeout_s", "  chat_template_timeout_s: 0.5\n", ""),
    ("job.chat_template_max_chars", "  chat_template_max_chars: 4096\n", ""),
]


@pytest.mark.parametrize("name, job, top", CHANGES, ids=[c[0] for c in CHANGES])
def test_a_changed_setting_refuses_the_resume_naming_it(tmp_path, demo_models, name, job, top):
    _setup(tmp_path, demo_models)
    out = tmp_path / "out"
    _killed_run(tmp_path, out)
    cfg = _cfg(tmp_path, job=job, top=top)
    if name == "job.sampling_params":                 # the override replaces the key written by _cfg
        cfg.job.sampling_params["max_tokens"] = 5
    with pytest.raises(InvalidArgument) as exc:
        run_job(cfg, out_dir=str(out), llm_factory=lambda c: pytest.fail("opened the model for a refused resume"))
    msg = str(exc.value)
    assert name in msg and "changed" in msg and "--restart" in msg and "new --out" in msg


@pytest.mark.parametrize("change", ["hot-add", "container"])
def test_a_changed_model_refuses_the_resume(tmp_path, demo_models, change):
    model = _setup(tmp_path, demo_models)
    out = tmp_path / "out"
    _killed_run(tmp_path, out)
    if change == "hot-add":
        _hot_add(model)
        want = "experts were hot-added or removed"
    else:
        _replace_container(model, demo_models[1])
        want = "different container"
    with pytest.raises(InvalidArgument, match=want):
        run_job(_cfg(tmp_path), out_dir=str(out), llm_factory=lambda c: pytest.fail("opened the model"))


def test_executor_settings_resume_to_the_same_bytes(tmp_path, demo_models):
    _setup(tmp_path, demo_models)
    run_job(_cfg(tmp_path), out_dir=str(tmp_path / "ref"), llm_factory=lambda c: FakeLLM())
    out = tmp_path / "out"
    _killed_run(tmp_path, out)
    cfg = _cfg(tmp_path, job="  batch_tokens: 7\n  prefill_chunk: 3\n  threads: 1\n")
    cfg.job.max_num_seqs = 5
    rep = run_job(cfg, out_dir=str(out), llm_factory=lambda c: FakeLLM())
    assert rep["complete"] and rep["rows"] == len(ROWS)
    names = sorted(n for n in os.listdir(out) if n.endswith(".jsonl"))
    assert len(names) == 4
    for n in names:
        assert (out / n).read_bytes() == (tmp_path / "ref" / n).read_bytes()


def _legacy_generation_signature(cfg, model_path):
    """The signature generate/score dirs were written under before the one runner (jobs/run/signature.py
    generation_signature and generation/plan.py kind_settings of that colibri, verbatim)."""
    from colibri_dist.jobs.run.signature import model_identity
    j, model = cfg.job, model_identity(model_path)
    paths = [os.path.join(j.input, n) for n in sorted(os.listdir(j.input))]
    inputs = [[os.path.abspath(p), os.path.getsize(p), os.stat(p).st_mtime_ns] for p in paths]
    kind_settings = {"fields": [j.prompt_field, j.messages_field, j.prompt_ids_field, j.sampling_field, j.id_field],
                     "sampling_params": dict(j.sampling_params), "seed": j.seed}
    return {"kind": j.kind, "model.container": (model or {}).get("container"),
            "model.bytes": (model or {}).get("bytes"), "model.hot_added_experts": (model or {}).get("hot_added"),
            "routing.policy": cfg.routing.policy, "job.w8a8": bool(getattr(j, "w8a8", True)),
            "job.kv_cache_dtype": getattr(j, "kv_cache_dtype", "f32"),
            "job.kv_cache_bytes": getattr(j, "kv_cache_bytes", None),
            "job.max_seq_len": getattr(j, "max_seq_len", None),
            "job.sampling_params": kind_settings["sampling_params"], "job.seed": kind_settings["seed"],
            "job.chat_template_timeout_s": getattr(j, "chat_template_timeout_s", None),
            "job.chat_template_max_chars": getattr(j, "chat_template_max_chars", None),
            "job (row fields)": kind_settings["fields"], "job.shard_rows": j.shard_rows, "job.input": inputs}


def test_a_dir_written_under_the_old_signature_resumes(tmp_path, demo_models):
    """The one runner keeps the generate/score signature: a dir whose manifest (and partial rows) carry the
    signature the earlier runner wrote resumes to the same bytes."""
    model = _setup(tmp_path, demo_models)
    run_job(_cfg(tmp_path), out_dir=str(tmp_path / "ref"), llm_factory=lambda c: FakeLLM())
    out = tmp_path / "out"
    _killed_run(tmp_path, out)
    manifest = json.loads((out / "manifest.json").read_text())
    old = _legacy_generation_signature(_cfg(tmp_path), model)
    assert manifest["signature"] == json.loads(json.dumps(old))
    manifest["signature"] = old
    (out / "manifest.json").write_text(json.dumps(manifest))
    rep = run_job(_cfg(tmp_path), out_dir=str(out), llm_factory=lambda c: FakeLLM())
    assert rep["complete"] and 0 < rep["shards"]["written_this_run"] < 4 and rep["rows"] == len(ROWS)
    for n in sorted(n for n in os.listdir(out) if n.endswith(".jsonl")):
        assert (out / n).read_bytes() == (tmp_path / "ref" / n).read_bytes()
