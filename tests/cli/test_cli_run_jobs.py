"""`colibri run` on generate jobs as a new user runs them (issue 21 items 11, 20, 21, 22), in-process on the
tiny constructed demo LLM: exit codes for bad rows, the error count first, the KV budget line, the no-YAML
defaults and flags, a closed pipe, and the messages that name the next step."""
import json
import os
import shutil

import pytest

from colibri_dist.cli import EXIT_ROW_ERRORS, build_parser, main
from colibri_dist.cli.run import default_workers, load_job


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from colibri_dist.config import DemoLLMConfig, parse_section
    from colibri_dist.demos.llm_cache import ensure_demo_llm
    root = tmp_path_factory.mktemp("demo")
    art = ensure_demo_llm(parse_section(DemoLLMConfig, {"layers": 2, "experts": 4, "prompts": 6, "shards": 1,
                                                         "cache_dir": str(root)}), log=lambda _: None)
    prompts = root / "prompts.jsonl"
    rows = [json.loads(line) for n in sorted(os.listdir(art.data_dir)) for line in open(os.path.join(art.data_dir, n))]
    with open(prompts, "w") as fh:
        for r in rows[:3] + [{"id": "bad", "prompt": ""}]:
            fh.write(json.dumps({k: r[k] for k in ("id", "prompt")}) + "\n")
    return art, str(prompts)


def test_bad_rows_exit_3_error_count_first_unless_on_error_continue(demo, tmp_path, capsys):
    art, prompts = demo
    out = str(tmp_path / "out")
    rc = main(["run", "--model", art.model, "--input", prompts, "--out", out, "--progress", "log"])
    err = capsys.readouterr().err
    assert rc == EXIT_ROW_ERRORS == 3
    assert "running in-process on the MoeExecutor (no Ray)" in err             # no-YAML default: no pool for this model
    line = next(x for x in err.splitlines() if "rows failed" in x)
    assert "1 of 4 rows failed" in line and "prompts.jsonl:4: row 'bad': empty prompt" in line
    assert "job.on_error: continue" in line and "--restart" in line
    assert err.index("rows failed") < err.index("generate summary")      # the count first, then the summary
    rc = main(["run", "--model", art.model, "--input", prompts, "--out", out, "--on-error", "continue"])
    assert rc == 0 and "nothing to do" in capsys.readouterr().err         # same rows, accepted
    rc = main(["run", "--model", art.model, "--input", prompts, "--out", str(tmp_path / "f"), "--on-error", "fail"])
    assert rc == 2 and "prompts.jsonl:4: row 'bad'" in capsys.readouterr().err


def test_kv_budget_is_a_flag_and_a_cap_is_said_at_load(demo, tmp_path, capsys):
    art, prompts = demo
    rc = main(["run", "--model", art.model, "--input", prompts, "--out", str(tmp_path / "o"), "--progress", "log",
               "--kv-cache-bytes", "100KiB", "--on-error", "continue"])
    err = capsys.readouterr().err
    assert rc == 0
    assert "warning: KV cache 1 blocks x 16 tokens" in err and "holds 16 tokens per sequence" in err
    assert "job.kv_cache_bytes" in err
    rc = main(["run", "--model", art.model, "--input", prompts, "--out", str(tmp_path / "p"), "--progress", "log",
               "--on-error", "continue"])
    err = capsys.readouterr().err
    assert rc == 0 and "warning: KV cache" not in err and "max_seq_len" in err


def test_no_yaml_defaults_and_sampling_flags(demo, tmp_path):
    art, prompts = demo
    parse = build_parser().parse_args
    cfg = load_job(parse(["run", "--model", art.model, "--input", prompts, "--max-tokens", "3",
                          "--temperature", "0.5", "--top-p", "0.9", "--top-k", "4", "--seed", "7"]))
    assert cfg.pool.workers == 0
    assert dict(cfg.job.sampling_params) == {"max_tokens": 3, "temperature": 0.5, "top_p": 0.9, "top_k": 4}
    assert cfg.job.seed == 7
    assert load_job(parse(["run", "--model", art.model, "--input", prompts, "--workers", "2"])).pool.workers == 2
    assert load_job(parse(["run", "--model", art.model, "--input", prompts, "--executor", "pool"])).pool.workers == 2
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable: 1 kB\n")
    assert default_workers(art.model, str(meminfo)) == 2                 # the model exceeds the RAM: a pool
    meminfo.write_text(f"MemAvailable: {os.path.getsize(art.model)} kB\n")
    assert default_workers(art.model, str(meminfo)) == 0
    from colibri_dist.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match="--max-tokens is a sampling setting of generate jobs"):
        load_job(parse(["run", "--model", art.model, "--input", prompts, "--kind", "score", "--max-tokens", "3"]))


def test_a_hugging_face_directory_as_the_model_suggests_convert(demo, tmp_path, capsys):
    art, prompts = demo
    rc = main(["run", "--model", art.hf_dir, "--input", prompts, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"colibri convert {art.hf_dir} MODEL.colibri" in err
    assert not os.path.exists(tmp_path / "o")


def test_a_closed_pipe_does_not_kill_the_job(demo, tmp_path, monkeypatch):
    import sys

    class Closed:
        writes = 0

        def write(self, text):
            Closed.writes += 1
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def isatty(self):
            return False
    art, prompts = demo
    monkeypatch.setattr(sys, "stderr", Closed())
    out = tmp_path / "o"
    rc = main(["run", "--model", art.model, "--input", prompts, "--out", str(out), "--progress", "log",
               "--on-error", "continue"])
    assert rc == 0 and Closed.writes == 1                        # tried once, then discarded
    with open(out / "report.json") as fh:
        assert json.load(fh)["complete"]
    assert len(open(out / "prompts.jsonl").readlines()) == 4


def test_convert_lists_the_tokenizer_files_inspect_lists(demo, tmp_path, capsys):
    art, _ = demo
    hf = tmp_path / "hf"
    shutil.copytree(art.hf_dir, hf)
    os.unlink(hf / "tokenizer.json")                              # generation_config.json etc. stay
    assert main(["convert", str(hf), str(tmp_path / "m.colibri"), "--progress", "none"]) == 0
    out = capsys.readouterr().out
    assert "tokenizer none" not in out and "generation_config.json" in out
    assert main(["inspect", str(tmp_path / "m.colibri")]) == 0
    assert "generation_config.json" in capsys.readouterr().out


def test_inspect_norm_topk_prob_follows_the_gating_kind():
    from colibri_dist.cli.convert import norm_topk_prob
    from colibri_dist.format.model_config import make_gating
    assert norm_topk_prob(make_gating("softmax_topk", 8, 2)) is False      # Qwen3 norm_topk_prob: false
    assert norm_topk_prob(make_gating("softmax_topk_norm", 8, 2)) is True
    assert norm_topk_prob(make_gating("sigmoid_group", 8, 2, n_group=4, topk_group=2, norm_topk_prob=False)) is False
