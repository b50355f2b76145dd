"""lm-evaluation-harness's `local-completions` model against a live server on a loglikelihood task built
here (a custom task YAML over a local JSONL file): every request's loglikelihood equals llm.score's."""
import json

import pytest

from serve_helpers import start_server

import lm_eval                   # in the [test] extra (pinned): a missing harness is a failure, not a skip

DOCS = [("count: seven eight", " nine ten"), ("spell: c d", " e f"), ("week: monday", " tuesday"),
        ("month: march", " may june"), ("count: one", " three")]


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory, demo_model):
    d = tmp_path_factory.mktemp("lm-eval-task")
    with open(d / "docs.jsonl", "w") as f:
        for ctx, cont in DOCS:
            f.write(json.dumps({"context": ctx, "continuation": cont}) + "\n")
    (d / "colibri_tiny.yaml").write_text(
        "task: colibri_tiny\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {d / 'docs.jsonl'}\ntest_split: test\noutput_type: loglikelihood\n"
        "doc_to_text: '{{context}}'\ndoc_to_target: '{{continuation}}'\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")
    return d


@pytest.fixture(scope="module")
def hf_tokenizer_dir(tmp_path_factory):
    from colibri_dist.demos import llm as demo_llm
    d = tmp_path_factory.mktemp("demo-hf")
    demo_llm.write_checkpoint(str(d), layers=2, n_experts=8)     # the same tokenizer files the model carries
    return str(d)


def test_lm_eval_local_completions_loglikelihoods_equal_llm_score(demo_model, reference_llm, task_dir,
                                                                   hf_tokenizer_dir, monkeypatch):
    import transformers
    from lm_eval.tasks import TaskManager
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    server = start_server(demo_model, served_model_name=("demo",))
    try:
        out = lm_eval.simple_evaluate(
            model="local-completions",
            model_args=f"model=demo,base_url={server.url}/v1/completions,tokenizer_backend=huggingface,"
                       f"tokenizer={hf_tokenizer_dir},num_concurrent=1,max_retries=1",
            tasks=["colibri_tiny"], task_manager=TaskManager(include_path=str(task_dir), include_defaults=False), log_samples=True)
    finally:
        server.stop()
    samples = sorted(out["samples"]["colibri_tiny"], key=lambda s: s["doc_id"])
    assert len(samples) == len(DOCS)
    tok = transformers.AutoTokenizer.from_pretrained(hf_tokenizer_dir)
    for s, (ctx, cont) in zip(samples, DOCS):
        ctx_ids = tok(ctx).input_ids
        whole = tok(ctx + cont).input_ids
        score = reference_llm.score([whole])[0]
        want = sum(score.token_logprobs[len(ctx_ids) - 1:])       # the continuation's tokens given the context
        got, greedy = s["resps"][0][0]
        assert float(got) == want, (ctx, got, want)
    assert out["results"]["colibri_tiny"]["acc,none"] == pytest.approx(
        sum(bool(s["resps"][0][0][1]) for s in samples) / len(DOCS))
