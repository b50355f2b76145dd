"""`colibri run` as a user runs it: exit codes, --help everywhere, the demo on a Ray pool, kill and resume.

One Ray session in this module (the default `colibri run`: the demo LLM on a pool, in a subprocess);
everything else runs in-process or with `pool.workers: 0` (MoeExecutor, no Ray).
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from colibri_dist.cli import build_parser, main
from colibri_dist.config import load_config
from colibri_dist.demos.classifier import ensure_demo
from colibri_dist.jobs.pipeline import run_job

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
  dataset: {{shards: {shards}, rows_per_shard: 16, seq_len: 12}}
pool: {{workers: {workers}, cache_bytes: {cache_bytes}}}
report: {{progress: log, html: {html}}}
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")

    def write(name, batch=64, shards=3, workers=0, cache_bytes="null", html="false"):
        path = root / name
        path.write_text(TINY.format(batch=batch, cache=root / "cache", shards=shards, workers=workers,
                                    cache_bytes=cache_bytes, html=html))
        return str(path)
    return root, write


def colibri(*args, timeout=240):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "colibri_dist", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def jsonl_outputs(out_dir):
    return {n: open(os.path.join(out_dir, n), "rb").read() for n in sorted(os.listdir(out_dir))
            if n.endswith(".jsonl")}

# ------------------------------------------------------------------ help and exit codes


def _subcommand_paths(parser, prefix=()):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield prefix + (name,)
                yield from _subcommand_paths(sub, prefix + (name,))


def test_help_on_every_subcommand_exits_0(capsys):
    paths = list(_subcommand_paths(build_parser()))
    surface = {("convert",), ("inspect",), ("verify",), ("run",), ("pool", "start"), ("pool", "status"),
               ("pool", "stop"), ("experts", "add"), ("experts", "list"), ("experts", "remove"),
               ("numa", "plan"), ("numa", "bench"), ("stress",), ("bench",)}     # the CLI surface of issue 7
    assert surface <= set(paths), sorted(surface - set(paths))
    for path in [()] + paths:
        with pytest.raises(SystemExit) as info:
            main([*path, "--help"])
        assert info.value.code == 0, path
        assert "usage: colibri" in capsys.readouterr().out


def test_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--no-such-flag"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


def test_config_errors_exit_2_with_file_line_column(env, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("job:\n  kind: token-classification\n  batch_tokns: 3\n")
    assert main(["run", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:3: job.batch_tokns: unknown key" in err
    assert main(["run", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err
    proc = colibri("run", str(bad))     # the real process exit status too
    assert proc.returncode == 2 and f"{bad}:3:3:" in proc.stderr


def test_runtime_failure_exits_1(env, tmp_path, capsys):
    root, write = env
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.jsonl").write_text('{"id": 0, "input_ids": [1, 2]}\n{"id": 1, "input_ids": [1, 500]}\n')
    art = ensure_demo(load_config(write("base.yaml")).demo, log=lambda _: None)
    job = tmp_path / "job.yaml"
    job.write_text(f"job: {{kind: token-classification, input: {data}}}\nmodel: {art.model}\n"
                   f"pool: {{workers: 0}}\nreport: {{progress: none}}\n")
    assert main(["run", str(job), "--out", str(tmp_path / "o")]) == 1
    assert f"{data / 'rows.jsonl'}:2: token id 500 out of range" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o" / "rows.jsonl")
    (tmp_path / "a-file").write_text("")
    assert main(["run", str(job), "--out", str(tmp_path / "a-file")]) == 1     # OS errors: message, no traceback
    assert "a-file: File exists" in capsys.readouterr().err


def test_bench_dispatches_and_reports_unknown_names(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "nonsense"])
    assert info.value.code == 2
    from colibri_dist.bench.__main__ import NAMES
    for name in NAMES:            # options after NAME reach the benchmark's own parser
        with pytest.raises(SystemExit) as info:
            main(["bench", name, "--help"])
        assert info.value.code == 0, name
        assert "usage: colibri bench" not in capsys.readouterr().out   # the benchmark's own help

# ------------------------------------------------------------------ the demo end to end on a Ray pool


@pytest.mark.ray
def test_default_run_is_the_demo_llm_on_a_ray_pool_and_workers_0_writes_the_same_bytes(tmp_path):
    """`colibri run` with no config, as on a fresh machine: the demo LLM is built into the cache, a pool
    of 2 workers with a cache smaller than the experts runs it, the report shows the task accuracy."""
    env = {"COLIBRI_CACHE_DIR": str(tmp_path / "cache")}
    proc = colibri_in(tmp_path, env, "run", "--progress", "log")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "building the demo MoE LLM" in proc.stderr and "starting a pool of 2 workers" in proc.stderr
    assert "colibri run: generate summary" in proc.stderr and "task accuracy (demo)" in proc.stderr
    assert "spilling to SSD disabled" not in proc.stderr
    out = tmp_path / "colibri-out"
    rep = json.loads((out / "report.json").read_text())
    assert rep["complete"] and rep["job"]["executor"] == "pool" and rep["rows"] == 128 and rep["errors"] == 0
    acc = rep["task_accuracy"]
    assert acc["rows"] == 128 and acc["accuracy"] == 1.0
    assert acc["by_task"] == {"numbers": 1.0, "letters": 1.0, "week": 1.0, "months": 1.0}
    run = rep["this_run"]
    assert run["throughput"]["decode_tokens_per_s"] > 0 and run["throughput"]["decode_tokens"] > 0
    assert len(run["workers"]) == 2 and all(w["tokens"] > 0 for w in run["workers"])
    assert run["cache"]["misses"] > 0 and run["cache"]["evictions"] > 0       # the offload tier in use
    html = (out / "report.html").read_text()
    assert "task accuracy (demo)" in html and "decode throughput" in html
    assert not [n for n in os.listdir(out) if n.startswith(".offload-")]      # temp offload dir removed
    proc = colibri_in(tmp_path, env, "run", "--workers", "0", "--out", "in-process")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "building the demo" not in proc.stderr                              # made once, cached
    assert json.loads((tmp_path / "in-process" / "report.json").read_text())["job"]["executor"] == "engine"
    assert jsonl_outputs(out) == jsonl_outputs(tmp_path / "in-process")      # placement never changes bits
    texts = [json.loads(line)["generated_text"] for blob in jsonl_outputs(out).values()
             for line in blob.decode().splitlines()]
    assert len(texts) == 128 and all(texts)


def test_packaged_configs_run_by_name(capsys):
    from colibri_dist.cli.run import DEMO_CONFIG, resolve_config
    assert resolve_config(None) == DEMO_CONFIG
    assert load_config(resolve_config(None)).job.kind == "generate"
    classify = resolve_config("demo-classify")
    assert os.path.isfile(classify) and load_config(classify).job.kind == "token-classification"
    assert resolve_config("no-such-config") == "no-such-config"            # then load_config names it
    assert main(["run", "no-such-config"]) == 2
    assert "no-such-config: cannot read config" in capsys.readouterr().err


def colibri_in(cwd, env, *args, timeout=300):
    full = dict(os.environ, PYTHONUNBUFFERED="1", **env)
    return subprocess.run([sys.executable, "-m", "colibri_dist", *args], capture_output=True, text=True,
                          timeout=timeout, env=full, cwd=str(cwd))


def test_token_classification_demo_in_process_matches_across_batches(env, tmp_path):
    root, write = env
    cfg = load_config(write("engine.yaml"))
    cfg.report.progress, cfg.report.summary = "none", False
    rep = run_job(cfg, out_dir=str(tmp_path / "a"))
    assert rep["complete"] and rep["job"]["executor"] == "engine" and rep["tokens"] == 3 * 16 * 12
    cfg = load_config(write("engine-small.yaml", batch=5, cache_bytes="40KiB"))
    cfg.report.progress, cfg.report.summary = "none", False
    run_job(cfg, out_dir=str(tmp_path / "b"))
    assert jsonl_outputs(tmp_path / "a") == jsonl_outputs(tmp_path / "b")

# ------------------------------------------------------------------ kill -9 mid-run, then resume


def test_killed_run_resumes_without_losing_or_duplicating_rows(env, tmp_path):
    root, write = env
    cfg_path = write("long.yaml", batch=4, shards=24)
    ensure_demo(load_config(cfg_path).demo, log=lambda _: None)
    ref = tmp_path / "ref"
    cfg = load_config(cfg_path)
    cfg.report.progress, cfg.report.summary = "none", False
    run_job(cfg, out_dir=str(ref))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "colibri_dist", "run", cfg_path, "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        manifest = out / "manifest.json"
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if manifest.exists():
                try:
                    if json.loads(manifest.read_text())["done"]:
                        break
                except (ValueError, KeyError):
                    pass       # read between write and rename cannot happen (atomic), but be safe
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    done = json.loads(manifest.read_text())
    assert 1 <= len(done["done"]) < 24 and not done["complete"], "the kill did not land mid-run"
    again = colibri("run", cfg_path, "--out", str(out))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming" in again.stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["shards"]["resumed"] == len(done["done"]) and rep["complete"]
    got, want = jsonl_outputs(out), jsonl_outputs(ref)
    assert got == want
    ids = [json.loads(line)["id"] for blob in got.values() for line in blob.decode().splitlines()]
    assert len(ids) == len(set(ids)) == 24 * 16
    assert not [n for n in os.listdir(out) if ".tmp-" in n]


def test_run_overrides_and_second_run_is_a_no_op(env, tmp_path, capsys):
    root, write = env
    cfg_path = write("override.yaml", workers=2)          # would start Ray, but --workers 0 keeps it in-process
    ensure_demo(load_config(cfg_path).demo, log=lambda _: None)
    out = str(tmp_path / "o")
    assert main(["run", cfg_path, "--workers", "-1", "--out", out]) == 2
    assert "--workers: expected an integer >= 0" in capsys.readouterr().err
    assert main(["run", cfg_path, "--workers", "0", "--progress", "none", "--out", out]) == 0
    assert json.load(open(os.path.join(out, "report.json")))["job"]["executor"] == "engine"
    capsys.readouterr()
    assert main(["run", cfg_path, "--executor", "engine", "--out", out]) == 0
    assert "nothing to do: all 3 shards" in capsys.readouterr().err
