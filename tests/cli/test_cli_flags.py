"""The CLI defects found trying `colibri` as a new user (issue 12 item 9), each pinned by a test.

No Ray in this module: the pool commands are exercised where they fail before touching Ray.
"""
import json
import os
import stat

import numpy as np
import pytest

from colibri_dist.cli import build_parser, main


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("COLIBRI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path / "state"


def _expert_file(path, hidden=8, inter=4):
    from safetensors.numpy import save_file
    rng = np.random.default_rng(0)
    save_file({"gate": rng.standard_normal((inter, hidden), dtype=np.float32),
               "up": rng.standard_normal((inter, hidden), dtype=np.float32),
               "down": rng.standard_normal((hidden, inter), dtype=np.float32),
               "router_row": rng.standard_normal(hidden, dtype=np.float32)}, str(path))
    return str(path)


def test_version(capsys):
    import colibri_dist
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"colibri {colibri_dist.__version__}"


def test_experts_on_a_pool_that_does_not_run_is_one_line(state_dir, tmp_path, capsys):
    weights = _expert_file(tmp_path / "e.safetensors")
    for argv in (["experts", "list", "--pool", "nosuch"], ["experts", "remove", "--pool", "nosuch", "--layer", "0",
                                                         "--expert", "1"],
                 ["experts", "add", "--pool", "nosuch", "--layer", "0", "--weights", weights],
                 ["experts", "list", "--name", "nosuch"],                       # the pool command's spelling
                 ["pool", "status", "--pool", "nosuch"], ["pool", "stop", "--name", "nosuch"]):
        assert main(argv) == 1, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "no running pool named 'nosuch'" in err, (argv, err)
        assert "Traceback" not in err


def test_pool_name_and_progress_flags_are_unified():
    parser = build_parser()
    for verb in ("status", "stop"):
        assert parser.parse_args(["pool", verb, "--pool", "a"]).pool == "a"
        assert parser.parse_args(["pool", verb, "--name", "a"]).pool == "a"
        assert parser.parse_args(["pool", verb]).pool == "default"
    assert parser.parse_args(["pool", "start", "c.yaml", "--name", "b"]).pool == "b"
    assert parser.parse_args(["pool", "start", "c.yaml"]).pool is None          # then pool.name, else default
    for verb in ("list", "add", "remove"):
        extra = {"list": [], "add": ["--layer", "0", "--weights", "w"], "remove": ["--layer", "0", "--expert", "1"]}
        assert parser.parse_args(["experts", verb, "--name", "x", *extra[verb]]).pool == "x"
        assert parser.parse_args(["experts", verb, *extra[verb]]).pool == "default"
    for argv in (["convert", "s", "d"], ["verify", "p"], ["run"]):
        assert parser.parse_args(argv + ["--no-progress"]).progress == "none"
        assert parser.parse_args(argv + ["--progress", "log"]).progress == "log"


def test_pool_list(state_dir, capsys):
    assert main(["pool", "list"]) == 0
    assert "no pools recorded" in capsys.readouterr().out
    from colibri_dist.pool import service
    service.write_state("gone", {"name": "gone", "address": "127.0.0.1:1", "head_pid": 2 ** 22 + 12345,
                                 "model": "/m.colibri"})
    service.write_state("ext", {"name": "ext", "address": "10.0.0.1:6379", "head_pid": None, "model": "/n.colibri"})
    assert main(["pool", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["ext: running, Ray 10.0.0.1:6379, model /n.colibri",
                   "gone: stale (its Ray head is gone), Ray 127.0.0.1:1, model /m.colibri"]
    assert main(["pool", "list", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["ext", "gone"]


def test_workers_above_the_core_count_warn(monkeypatch, tmp_path, capsys):
    from colibri_dist.cli.common import core_count, warn_workers
    assert warn_workers(core_count()) is None
    assert "is more than the" in warn_workers(core_count() + 1)
    import colibri_dist.jobs.pipeline as runner
    seen = []
    monkeypatch.setattr(runner, "run_job", lambda cfg, **kw: seen.append(cfg) or {"complete": True})
    assert main(["run", "--workers", str(core_count() + 14)]) == 0
    assert f"--workers {core_count() + 14} is more than the {core_count()} core(s)" in capsys.readouterr().err
    assert seen[0].pool.workers == core_count() + 14
    assert main(["run", "--workers", "1"]) == 0 and "warning" not in capsys.readouterr().err


def test_run_threads_model_input_without_a_yaml(monkeypatch, tmp_path, capsys):
    import colibri_dist.jobs.pipeline as runner
    seen = []
    monkeypatch.setattr(runner, "run_job", lambda cfg, **kw: seen.append(cfg) or {"complete": True})
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--model", "m.colibri", "--input", "p.jsonl", "--threads", "1", "--workers", "0"]) == 0
    cfg = seen[-1]
    assert cfg.job.kind == "generate" and cfg.model == str(tmp_path / "m.colibri")
    assert cfg.job.input == str(tmp_path / "p.jsonl") and cfg.job.threads == 1 and cfg.pool.workers == 0
    assert main(["run", "--model", "m.colibri", "--input", "p.jsonl", "--kind", "score"]) == 0
    assert seen[-1].job.kind == "score" and seen[-1].pool.threads_per_worker is None
    assert main(["run", "demo-classify", "--threads", "2"]) == 0
    assert seen[-1].job.kind == "token-classification" and seen[-1].pool.threads_per_worker == 2
    assert main(["run", "--model", "m.colibri"]) == 2
    assert "--model without CONFIG needs --input" in capsys.readouterr().err
    assert main(["run", "--threads", "0"]) == 2
    assert "--threads: expected an integer >= 1" in capsys.readouterr().err


def test_run_model_and_input_end_to_end_on_the_demo_llm(tmp_path, capsys):
    pytest.importorskip("tokenizers")
    from colibri_dist.config import DemoLLMConfig
    from colibri_dist.demos.llm_cache import ensure_demo_llm
    art = ensure_demo_llm(DemoLLMConfig(layers=2, experts=4, prompts=8, shards=1, cache_dir=str(tmp_path / "c")),
                          log=lambda _: None)
    out = tmp_path / "o"
    old = os.umask(0o002)
    try:
        assert main(["run", "--model", art.model, "--input", art.data_dir, "--workers", "0", "--threads", "1",
                     "--out", str(out), "--no-progress"]) == 0
    finally:
        os.umask(old)
    rows = [json.loads(line) for line in open(out / "shard-00000.jsonl")]
    assert len(rows) == 8 and all(r["generated_text"] for r in rows)
    for name in ("shard-00000.jsonl", "manifest.json", "report.json", "report.html"):   # job outputs follow the umask
        assert stat.S_IMODE(os.stat(out / name).st_mode) == 0o664, name


def test_outputs_follow_the_umask(tmp_path):
    from colibri_dist.fsutil import atomic_write
    old = os.umask(0o027)
    try:
        atomic_write(str(tmp_path / "a"), [b"x"])
        assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o640
        os.umask(0o002)
        atomic_write(str(tmp_path / "b"), [b"x"])
        assert stat.S_IMODE(os.stat(tmp_path / "b").st_mode) == 0o664
        atomic_write(str(tmp_path / "c"), [b"x"], mode=0o600)
        assert stat.S_IMODE(os.stat(tmp_path / "c").st_mode) == 0o600
    finally:
        os.umask(old)


def test_out_is_not_created_when_the_config_is_rejected(tmp_path, capsys):
    from colibri_dist.config import DemoConfig
    from colibri_dist.demos.classifier import ensure_demo
    art = ensure_demo(DemoConfig(vocab_size=64, hidden=16, inter=16, layers=2, experts=4,
                                 cache_dir=str(tmp_path / "c")), log=lambda _: None)
    np.save(tmp_path / "x.npy", np.zeros((2, 16), np.float32))
    job = tmp_path / "moe.yaml"
    job.write_text(f"job: {{kind: moe-layer, input: {tmp_path / 'x.npy'}, layers: 9}}\nmodel: {art.model}\n"
                   f"pool: {{workers: 0}}\nreport: {{progress: none}}\n")
    assert main(["run", str(job), "--out", str(tmp_path / "o1")]) == 2
    assert "job.layers: layer 9 is not a MoE layer" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o1")
    gen = tmp_path / "gen.yaml"
    gen.write_text(f"job: {{kind: generate, input: {tmp_path / 'nothing-here'}}}\nmodel: {art.model}\n"
                   f"pool: {{workers: 0}}\nreport: {{progress: none}}\n")
    assert main(["run", str(gen), "--out", str(tmp_path / "o2")]) == 2
    assert not os.path.exists(tmp_path / "o2")
    bad = tmp_path / "bad.yaml"
    bad.write_text("job: {kind: generate, sampling_params: {max_tokens: -1}}\n")
    assert main(["run", str(bad), "--out", str(tmp_path / "o3")]) == 2
    assert not os.path.exists(tmp_path / "o3")


@pytest.mark.parametrize("missing, argv, extra", [("fastapi", ["serve", "{model}"], "serve"),
                                                  ("uvicorn", ["serve", "{model}"], "serve")])
def test_a_command_whose_extra_is_missing_says_which_to_install(tmp_path, missing, argv, extra):
    """The newcomer's path (issue 31): `pip install -e . && colibri serve` died with a ModuleNotFoundError."""
    import subprocess
    import sys
    model = tmp_path / "m.colibri"
    model.write_bytes(b"x")
    code = (f"import sys; sys.modules[{missing!r}] = None\n"
            f"from colibri_dist.cli import main\nsys.exit(main({[a.format(model=model) for a in argv]!r}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert f"pip install 'colibri-dist[{extra}]'" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
