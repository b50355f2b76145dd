"""The server's engine in a process of its own (serve/engine_process.py): the same bits as in process, a
dead engine process is a 503 for new requests and /health, never a hang."""
import os
import signal

import httpx
import pytest

from colibri_dist.generate import SamplingParams
from colibri_dist.serve import ServeConfig, Server

PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]


@pytest.fixture(scope="module")
def server(demo_model):
    with Server(ServeConfig(model=demo_model, port=0, max_num_seqs=4)) as s:
        yield s


def test_the_engine_runs_in_a_child_process_and_answers_with_the_in_process_bits(server, reference_llm):
    assert server.remote is not None and server.remote._proc.pid != os.getpid() and server.remote.alive
    bodies = [{"prompt": p, "max_tokens": 12, "temperature": 0.8, "seed": i, "logprobs": 2}
              for i, p in enumerate(PROMPTS)]
    with httpx.Client(base_url=server.url, timeout=60) as c:
        got = [c.post("/v1/completions", json=b).json()["choices"][0] for b in bodies]
    ref = reference_llm.generate(PROMPTS, [SamplingParams(max_tokens=12, temperature=0.8, seed=i, logprobs=2)
                                           for i in range(len(PROMPTS))])
    for g, r in zip(got, ref):
        assert g["text"] == r.outputs[0].text
        assert g["logprobs"]["token_logprobs"] == [lp.logprob for lp in r.outputs[0].logprobs]
    stats = server.state.backend.model_stats()[0]                     # /metrics' model stats: from the child
    assert stats["kv_cache"]["blocks"] > 0


def test_a_killed_engine_process_is_a_503_and_an_unhealthy_server(demo_model):
    with Server(ServeConfig(model=demo_model, port=0)) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        assert c.get("/health").status_code == 200
        os.kill(s.remote._proc.pid, signal.SIGKILL)
        s.remote._proc.join(10)
        assert c.get("/health").status_code == 503
        r = c.post("/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 4})     # the client's timeout: no hang
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_stopped"


def test_the_cli_flag_keeps_the_engine_in_process(demo_model):
    from colibri_dist.cli import build_parser
    from colibri_dist.cli.serve import config_from_args
    parse = build_parser().parse_args
    assert config_from_args(parse(["serve", demo_model])).engine_process is True
    assert config_from_args(parse(["serve", demo_model, "--engine-in-process"])).engine_process is False


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_token_id_outside_the_vocabulary_is_a_400_naming_it_and_the_server_goes_on(server, stream):
    vocab = server.llm.vocab_size
    body = {"prompt": [5, 6, 7], "max_tokens": 4, "min_tokens": 2, "stop_token_ids": [vocab + 5], "stream": stream}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/v1/completions", json=body)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "stop_token_ids" and f"{vocab + 5} is outside the vocabulary" in err["message"]
        ok = c.post("/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 4})
        assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] == "length"
