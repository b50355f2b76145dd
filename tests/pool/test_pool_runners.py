"""Sequence runners over the shared expert pool (one local Ray for the module): generate and score
bit-identical to LLM in process whatever the runner and lane count, and a SIGKILLed runner's
requests resume on another runner from their last committed token with the same bits."""
import os
import signal
import sys
import threading
import time

import pytest
import ray

import colibri_dist as cd
from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import SamplingParams
from colibri_dist.pool.runners import RunnerPool
from colibri_dist.testing.pytest_ray import init_local

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "model"))
pytestmark = pytest.mark.ray
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def ray_address():
    init_local(num_cpus=4)                  # retried under load (colibri_dist/testing/pytest_ray.py)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    from model_cases import write_case
    src = tmp_path_factory.mktemp("hf-qwen2moe")
    write_case("qwen2_moe", src)
    return cd.convert(src, tmp_path_factory.mktemp("cb") / "q.colibri", experts="int8", dense="int8",
                      progress=False)


def prompts(k=6):
    import numpy as np
    return [np.random.default_rng(s).integers(0, 97, 3 + 4 * s).tolist() for s in range(k)]


PARAMS = [SamplingParams(max_tokens=8, temperature=0, ignore_eos=True, logprobs=2),
          SamplingParams(max_tokens=10, temperature=0.9, top_p=0.9, ignore_eos=True, logprobs=1)]
LLM_KW = dict(threads=1, max_num_seqs=4, max_num_batched_tokens=24)


def key(c):
    return (c.request_id, c.token_ids, c.finish_reason, c.error,
            [(lp.token_id, lp.logprob, lp.top) for lp in c.logprobs or []])


@pytest.fixture(scope="module")
def reference(model_path):
    ps = prompts()
    params = [PARAMS[i % 2] for i in range(len(ps))]
    with cd.LLM(model_path, **LLM_KW) as llm:
        return ps, params, llm.generate(ps, params), llm.score(ps[:3])


def test_runners_generate_and_score_bit_identical_to_the_llm_in_process(ray_address, model_path, reference):
    ps, params, ref, ref_scores = reference
    for runners, lanes, workers in ((1, 1, 1), (2, 2, 2)):
        with RunnerPool(model_path, runners=runners, lanes=lanes, workers=workers, threads_per_worker=1,
                        llm=LLM_KW) as rp:
            out = rp.generate(ps, params)
            assert [key(c) for c in out] == [key(c) for c in ref]
            scores = rp.score(ps[:3])
            assert [(s.token_logprobs, s.total_logprob) for s in scores] == \
                   [(s.token_logprobs, s.total_logprob) for s in ref_scores]
            st = rp.stats()
            assert st["routing_at"] == "runners" and st["clients"] == runners and st["tokens"] > 0
            assert all(r["alive"] for r in st["runners"]) and sum(r["steps"] for r in st["runners"]) > 0
    with pytest.raises(InvalidArgument, match="runners"):
        RunnerPool(model_path, runners=0)
    with pytest.raises(InvalidArgument, match="warp"):
        RunnerPool(model_path, llm={"warp": 1})


def test_sigkilled_runner_resumes_elsewhere_from_the_last_committed_token(ray_address, model_path, reference):
    from colibri_dist.pool.config import PoolConfig, PoolHooks
    ps, params, ref, _ = reference
    cfg = PoolConfig(workers=1, threads_per_worker=1, max_restarts=0, hooks=PoolHooks(runner_step_delay_s=0.25))
    with RunnerPool(model_path, cfg, runners=2, lanes=2, llm=LLM_KW) as rp:
        victim = rp.runner_pids()[1]
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", rp.generate(ps, params)))
        t.start()
        time.sleep(1.5)  # a few steps of ~12 in: runner 1 has committed tokens of its requests
        assert t.is_alive()
        os.kill(victim, signal.SIGKILL)
        t.join(timeout=180)
        assert [key(c) for c in out["r"]] == [key(c) for c in ref]
        st = rp.stats()
        assert st["lost_runners"] == [1] and st["resubmits"] >= 1 and st["resumed_tokens"] > 0
        assert [r["alive"] for r in st["runners"]] == [True, False]
        # issue 21 item 9: the lost runner's requests go to the survivor in ONE submit (its lanes batch
        # them: at most `lanes` new threads), not one submit and thread per request
        assert st["resubmits"] >= 2 and len(rp._submits[0]) == 2, (st["resubmits"], len(rp._submits[0]))
        # ... and join the survivor's running engines: never more lane threads alive than lanes
        assert 1 <= st["runners"][0]["peak_lane_threads"] <= 2, st["runners"][0]
