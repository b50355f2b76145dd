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


def test_ray_serve_deployment_answers_like_generate(demo_model, reference_llm):
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
        import ray
        ray.shutdown()


def test_replica_bounds_are_checked(demo_model):
    from colibri_dist.errors import InvalidArgument
    from colibri_dist.serve import ray_serve
    with pytest.raises(InvalidArgument, match="max_replicas"):
        ray_serve.deployment(demo_model, min_replicas=2, max_replicas=1)
    with pytest.raises(InvalidArgument, match="min_replicas"):
        ray_serve.deployment(demo_model, min_replicas=0)
