"""Experts on a 2-worker Ray pool: the in-process engine over it, and 2 sequence runners over it
(`--workers 2 --runners 2`: requests spread over both, streamed or not, LLM.generate's bits; a vanished
client frees its runner's KV blocks; a dead runner's request is a 503, the other serves on); and the same
app as a Ray Serve deployment. One loopback Ray and one pool for the module."""
import asyncio
import socket
import threading
import time

import httpx
import pytest

pytest.importorskip("ray.serve")

from colibri_dist.generate import SamplingParams  # noqa: E402
from colibri_dist.serve.config import ServeConfig  # noqa: E402

pytestmark = pytest.mark.ray


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def local_ray():
    """One loopback Ray for the module: the 2-worker pool server and the Ray Serve deployment share it."""
    import ray
    from colibri_dist.testing.pytest_ray import connect_local
    connect_local()                     # retried under load
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def pool2(local_ray, demo_model):
    """The module's 2 expert workers; runners on it sleep 10 ms a step (a window for the disconnect test)."""
    from colibri_dist.pool import Pool, PoolHooks
    pool = Pool(demo_model, workers=2, hooks=PoolHooks(runner_step_delay_s=0.01))
    yield pool
    pool.shutdown()


def _server(path, pool, **options):
    from colibri_dist.serve import Server
    return Server(ServeConfig(model=path, port=0, workers=2, **options), pool=pool).start()


def test_server_with_experts_on_a_2_worker_pool_gives_generate_bits(pool2, demo_model, reference_llm):
    s = _server(demo_model, pool2, max_num_seqs=8)
    try:
        bodies = [{"prompt": p, "max_tokens": 5, "temperature": 1.5, "seed": i, "logprobs": 1}
                  for i, p in enumerate(["count: seven eight", "spell: c d", "week: monday", "month: may"])]
        with httpx.Client(base_url=s.url, timeout=120) as c:
            got = [c.post("/v1/completions", json=b).json()["choices"][0] for b in bodies]
            metrics = c.get("/metrics").text
        want = reference_llm.generate([b["prompt"] for b in bodies],
                                      [SamplingParams(max_tokens=5, temperature=1.5, seed=i, logprobs=1)
                                       for i in range(len(bodies))])
        assert [g["text"] for g in got] == [w.outputs[0].text for w in want]
        assert [g["logprobs"]["token_logprobs"] for g in got] == [[lp.logprob for lp in w.outputs[0].logprobs]
                                                                  for w in want]
        assert 'colibri_pool_worker_tokens{worker="0"}' in metrics and 'worker="1"' in metrics
    finally:
        s.stop()


@pytest.fixture(scope="module")
def runners2(pool2, demo_model):
    s = _server(demo_model, pool2, runners=2, served_model_name=("demo",), max_num_seqs=8)
    yield s
    s.stop()


def _metric(text, name, label=None):
    for line in text.splitlines():
        key = name if label is None else f"{name}{{{label}}}"
        if line.startswith(key + " "):
            return float(line.split()[1])
    raise AssertionError(f"{key} not in /metrics")


def test_two_runners_answer_like_generate_and_share_the_requests(runners2, reference_llm):
    openai = pytest.importorskip("openai")
    prompts = ["count: seven eight", "spell: c d", "week: monday", "month: may"]
    want = reference_llm.generate(prompts, [SamplingParams(max_tokens=5, temperature=1.5, seed=i, logprobs=1)
                                            for i in range(len(prompts))])
    client = openai.OpenAI(base_url=runners2.url + "/v1", api_key="unused", max_retries=0)
    got = [client.completions.create(model="demo", prompt=p, max_tokens=5, temperature=1.5, seed=i,
                                     logprobs=1).choices[0] for i, p in enumerate(prompts)]
    assert [g.text for g in got] == [w.outputs[0].text for w in want]
    assert [g.logprobs.token_logprobs for g in got] == [[lp.logprob for lp in w.outputs[0].logprobs] for w in want]

    async def one(ac, i, p):
        text, lps = "", []
        async for c in await ac.completions.create(model="demo", prompt=p, max_tokens=5, temperature=1.5, seed=i,
                                                   logprobs=1, stream=True):
            if c.choices:
                text += c.choices[0].text
                lps += c.choices[0].logprobs.token_logprobs if c.choices[0].logprobs else []
        return text, lps

    async def all_of():
        async with openai.AsyncOpenAI(base_url=runners2.url + "/v1", api_key="unused", max_retries=0) as ac:
            return await asyncio.gather(*(one(ac, i, p) for i, p in enumerate(prompts)))
    streamed = asyncio.run(all_of())
    assert streamed == [(w.outputs[0].text, [lp.logprob for lp in w.outputs[0].logprobs]) for w in want]
    m = httpx.get(runners2.url + "/metrics", timeout=60).text
    routed = [_metric(m, "colibri_runner_requests_routed", f'runner="{i}"') for i in (0, 1)]
    made = [_metric(m, "colibri_runner_generation_tokens", f'runner="{i}"') for i in (0, 1)]
    assert sum(routed) == 8 and min(routed) >= 2, routed          # least loaded: both runners got requests
    assert sum(made) == 40 and min(made) > 0, made
    assert _metric(m, "colibri_runner_alive", 'runner="1"') == 1
    assert _metric(m, "colibri_generation_tokens_total") >= 40
    assert _metric(m, "colibri_pool_worker_tokens", 'worker="0"') > 0
    assert _metric(m, "colibri_pool_worker_tokens", 'worker="1"') > 0


def test_a_vanished_client_frees_its_runners_kv_blocks(runners2):
    def kv_used():
        m = httpx.get(runners2.url + "/metrics", timeout=60).text
        return [_metric(m, "colibri_runner_kv_cache_blocks_used", f'runner="{i}"') for i in (0, 1)], m
    assert kv_used()[0] == [0, 0]
    aborted = _metric(kv_used()[1], "colibri_requests_total", 'status="aborted"')
    c = httpx.Client(base_url=runners2.url, timeout=30)
    body = {"model": "demo", "prompt": "count: one", "max_tokens": 150, "ignore_eos": True, "stream": True}
    with c.stream("POST", "/v1/completions", json=body) as r:
        it = r.iter_bytes()
        next(it)
        used, _ = kv_used()
        assert sum(u > 0 for u in used) == 1, used                  # one runner holds the request
        c.close()                                                   # the client vanishes mid-stream
    end = time.time() + 30
    while kv_used()[0] != [0, 0] and time.time() < end:
        time.sleep(0.05)
    used, m = kv_used()
    assert used == [0, 0], "KV blocks were not freed after the client went away"
    assert _metric(m, "colibri_requests_total", 'status="aborted"') == aborted + 1
    assert _metric(m, "colibri_requests_running") == 0


def test_a_dead_runners_request_is_answered_503_and_the_other_runner_serves_on(runners2, reference_llm):
    """The engine client hands a dead runner's DELTA requests back as EngineLost: 503, nothing resumed; the
    survivor takes the next requests (runs last on runners2: a runner stays dead)."""
    import ray
    rs, got = runners2.runner_set, {}
    body = {"model": "demo", "prompt": "count: one", "max_tokens": 150, "ignore_eos": True}
    t = threading.Thread(target=lambda: got.setdefault("r", httpx.post(runners2.url + "/v1/completions", json=body,
                                                                       timeout=120)))
    t.start()
    end = time.time() + 30
    while not list(rs.owner.values()) and time.time() < end:
        time.sleep(0.01)
    (victim,) = list(rs.owner.values())
    ray.kill(rs.runners[victim], no_restart=True)
    t.join(120)
    err = got["r"].json()["error"]
    assert got["r"].status_code == 503 and err["code"] == "engine_error", got["r"].text
    assert f"sequence runner {victim} died" in err["message"]
    want = reference_llm.generate(["count: seven eight"], SamplingParams(max_tokens=5, temperature=0))[0].text
    for _ in range(2):                                              # both to the survivor
        ok = httpx.post(runners2.url + "/v1/completions", timeout=60,
                        json={"model": "demo", "prompt": "count: seven eight", "max_tokens": 5, "temperature": 0})
        assert ok.status_code == 200 and ok.json()["choices"][0]["text"] == want
    m = httpx.get(runners2.url + "/metrics", timeout=60).text
    assert _metric(m, "colibri_runner_alive", f'runner="{victim}"') == 0
    assert _metric(m, "colibri_runner_alive", f'runner="{1 - victim}"') == 1
    assert httpx.get(runners2.url + "/health", timeout=30).status_code == 200


def _replicas_running():
    from ray import serve
    dep = serve.status().applications["colibri"].deployments["ColibriServer"]
    return {str(k).rsplit(".", 1)[-1]: v for k, v in dep.replica_states.items()}.get("RUNNING", 0)


def test_ray_serve_autoscaled_deployment_answers_like_generate(local_ray, demo_model, reference_llm, capsys):
    from colibri_dist.serve import ray_serve
    cfg = ServeConfig(model=demo_model, port=_port(), served_model_name=("demo",), max_num_seqs=4, max_waiting=4)
    url, pool = ray_serve.start(cfg, min_replicas=2, max_replicas=3)       # autoscaling, two replicas at least
    assert ray_serve.REPLICA_GRPC_NOTE in capsys.readouterr().err          # what stays off loopback is said
    try:
        end = time.time() + 60
        while httpx.get(url + "/health", timeout=5).status_code != 200 or _replicas_running() < 2:
            assert time.time() < end
            time.sleep(0.2)
        prompts = ["count: seven eight", "spell: c d", "week: monday", "month: may"] * 2
        want = reference_llm.generate(prompts, [SamplingParams(max_tokens=4, temperature=1.5, seed=i)
                                                for i in range(len(prompts))])

        async def all_of():
            async with httpx.AsyncClient(base_url=url, timeout=60) as c:
                return await asyncio.gather(*(c.post("/v1/completions", json={
                    "model": "demo", "prompt": p, "max_tokens": 4, "temperature": 1.5, "seed": i})
                    for i, p in enumerate(prompts)))
        got = asyncio.run(all_of())
        assert [r.status_code for r in got] == [200] * len(prompts), got[0].text
        assert [r.json()["choices"][0]["text"] for r in got] == [w.text for w in want]
        assert _replicas_running() >= 2
        bad = httpx.post(url + "/v1/completions", json={"model": "nope", "prompt": "x"}, timeout=60)
        assert bad.status_code == 404 and bad.json()["error"]["code"] == "model_not_found"
    finally:
        ray_serve.stop(pool)


def test_replica_bounds_are_checked(demo_model):
    from colibri_dist.errors import InvalidArgument
    from colibri_dist.serve import ray_serve
    with pytest.raises(InvalidArgument, match="max_replicas"):
        ray_serve.deployment(demo_model, min_replicas=2, max_replicas=1)
    with pytest.raises(InvalidArgument, match="min_replicas"):
        ray_serve.deployment(demo_model, min_replicas=0)
