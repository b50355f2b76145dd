"""The same app as a Ray Serve deployment on a local loopback Ray: one replica answers like LLM.generate."""
import socket
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
    from colibri_dist.pool.ray_setup import connect
    connect(None)
    yield
    ray.shutdown()


def test_server_with_experts_on_a_2_worker_pool_gives_generate_bits(local_ray, demo_model, reference_llm):
    from serve_helpers import start_server
    s = start_server(demo_model, workers=2, max_num_seqs=8)
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


def test_ray_serve_deployment_answers_like_generate(local_ray, demo_model, reference_llm):
    from colibri_dist.serve import ray_serve
    cfg = ServeConfig(model=demo_model, port=_port(), served_model_name=("demo",), max_num_seqs=4, max_waiting=4)
    url, pool = ray_serve.start(cfg)
    try:
        end = time.time() + 60
        while httpx.get(url + "/health", timeout=5).status_code != 200:
            assert time.time() < end
            time.sleep(0.2)
        r = httpx.post(url + "/v1/completions", json={"model": "demo", "prompt": "count: seven eight",
                                                      "max_tokens": 4, "temperature": 0}, timeout=60)
        assert r.status_code == 200, r.text
        want = reference_llm.generate(["count: seven eight"], SamplingParams(max_tokens=4, temperature=0.0))[0]
        assert r.json()["choices"][0]["text"] == want.text == "nine ten eleven twelve"
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
