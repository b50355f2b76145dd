"""An interrupted generate job keeps the rows it finished (not only whole shards) and resumes to the same bytes.

The demo LLM runs for real; the "Ctrl-C" is a KeyboardInterrupt raised at the start of an engine step once
some rows have finished (deterministic, no timing). The rows kept in the partial files are not run again,
the resumed output equals an uninterrupted run's byte for byte, and `colibri run` prints the resume command.
"""
import json
import os
import shlex

import pytest

import colibri_dist as cd
from colibri_dist.cli import main
from colibri_dist.config import load_config
from colibri_dist.demos import llm as demo_llm
from colibri_dist.jobs.generation import llm as job_llm
from colibri_dist.jobs.run.partial import kept_count
from colibri_dist.jobs.pipeline import run_job

pytest.importorskip("tokenizers")
STOP_AFTER = 5                       # finished rows before the interrupt


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("interrupt")
    demo_llm.write_checkpoint(str(root / "hf"), layers=2, n_experts=4)
    cd.convert(str(root / "hf"), str(root / "m.colibri"), progress=False)
    os.makedirs(root / "data")
    with open(root / "data" / "in.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in demo_llm.prompts(12, max_tokens=6))
    (root / "job.yaml").write_text("job:\n  kind: generate\n  input: data\n  shard_rows: 6\n  max_num_seqs: 3\n"
                                   "model: m.colibri\npool: {workers: 0}\nreport: {progress: none}\n")
    run_job(load_config(str(root / "job.yaml")), out_dir=str(root / "ref"))
    return root


def _interrupting(after, counts):
    """An llm_factory: the job's LLM, interrupted as _wrap says."""
    return lambda cfg: _wrap(job_llm.open_job_llm(cfg), after, counts)


def _wrap(llm, after, counts=None):
    """The LLM with its engine raising KeyboardInterrupt at the first step after `after` finished rows
    (None: never); counts["added"] counts the requests added."""
    eng, finished, counts = llm.llm_engine, [], {} if counts is None else counts
    step, add = eng.step, eng.add_request

    def stepping(*a, **k):
        if after is not None and len(finished) >= after:
            raise KeyboardInterrupt
        outs = step(*a, **k)
        finished.extend(o for o in outs if o.finished)
        return outs

    def adding(*a, **k):
        counts["added"] = counts.get("added", 0) + 1
        return add(*a, **k)
    eng.step, eng.add_request = stepping, adding
    return llm


def _outputs(out):
    return {n: (out / n).read_bytes() for n in sorted(os.listdir(out)) if n.endswith(".jsonl")}


def test_interrupted_rows_are_kept_and_the_resume_runs_only_the_rest(demo):
    cfg, out = load_config(str(demo / "job.yaml")), demo / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_job(cfg, out_dir=str(out), llm_factory=_interrupting(STOP_AFTER, {}))
    assert _outputs(out) == {}                                  # no shard was finished...
    kept = kept_count(str(out))
    assert STOP_AFTER <= kept < 12                              # ...but the rows that were are on disk
    counts = {}
    rep = run_job(cfg, out_dir=str(out), llm_factory=_interrupting(None, counts))
    assert counts["added"] == 12 - kept and rep["rows"] == 12 and rep["complete"]
    assert _outputs(out) == _outputs(demo / "ref") and len(_outputs(out)) == 2
    assert not [n for n in os.listdir(out) if n.endswith(".partial")]
    ref = json.loads((demo / "ref" / "report.json").read_text())
    assert (rep["generated_tokens"], rep["input_tokens"], rep["finish_reasons"]) == \
        (ref["generated_tokens"], ref["input_tokens"], ref["finish_reasons"])


def test_restart_discards_the_kept_rows(demo):
    cfg, out = load_config(str(demo / "job.yaml")), demo / "restart"
    with pytest.raises(KeyboardInterrupt):
        run_job(cfg, out_dir=str(out), llm_factory=_interrupting(STOP_AFTER, {}))
    counts = {}
    run_job(cfg, out_dir=str(out), restart=True, llm_factory=_interrupting(None, counts))
    assert counts["added"] == 12 and _outputs(out) == _outputs(demo / "ref")


def test_colibri_run_says_how_to_resume(demo, monkeypatch, capsys):
    out = demo / "cli"
    argv = ["run", str(demo / "job.yaml"), "--out", str(out), "--restart"]
    with monkeypatch.context() as m:
        m.setattr(job_llm, "open_job_llm", _interrupting_open(STOP_AFTER))
        assert main(argv) == 130
    err = capsys.readouterr().err
    hint = next(line for line in err.splitlines() if "resume with:" in line)
    assert f"finished row(s) of the shards in flight are kept in {out}" in hint
    resume = shlex.split(hint.split("resume with: ", 1)[1])
    assert resume == ["colibri", "run", str(demo / "job.yaml"), "--out", str(out)]     # --restart dropped
    assert main(resume[1:]) == 0 and _outputs(out) == _outputs(demo / "ref")


def _interrupting_open(after):
    real = job_llm.open_job_llm
    return lambda cfg, offload_dir=None, log=None: _wrap(real(cfg, offload_dir, log), after)


def test_partial_rows_of_another_job_are_ignored_and_replaced(tmp_path):
    from colibri_dist.jobs.run.partial import PartialRows
    old = PartialRows(str(tmp_path), {"job.seed": 1})
    old.add("s", 0, '{"id": "a"}')
    old.close()
    new = PartialRows(str(tmp_path), {"job.seed": 2})
    assert new.load("s") == {}
    new.add("s", 1, '{"id": "b"}')
    new.close()
    assert PartialRows(str(tmp_path), {"job.seed": 2}).load("s") == {1: ('{"id": "b"}', False)}
    assert old.load("s") == {}
