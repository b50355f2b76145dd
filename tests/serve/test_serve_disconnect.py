"""A non-streaming client that disconnects is aborted as soon as it goes, as a stream's is (issue 31, defect 5):
it used to be noticed only after 0.5 s without output, i.e. never while the engine was producing tokens, so
its request ran to the end holding its KV blocks."""
import threading
import time

import httpx

from colibri_dist.serve import ServeConfig, Server

STEP_S = 0.02                 # each engine step made this slow (this process's engine): the request runs ~5 s


def _count(http, status):
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("colibri_requests_total") and f'status="{status}"' in line:
            return float(line.split()[-1])
    return 0.0


def test_a_non_streaming_client_that_leaves_is_aborted_while_tokens_flow(demo_model):
    with Server(ServeConfig(model=demo_model, port=0, engine_process=False)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as http:
        engine = server.state.backend.engine
        step = engine.step
        engine.step = lambda *a, **k: (time.sleep(STEP_S), step(*a, **k))[1]
        aborted, finished = _count(http, "aborted"), _count(http, "finished")
        body = {"prompt": [5, 6, 7], "max_tokens": 240, "ignore_eos": True, "temperature": 0}

        def client():                      # gives up after 0.5 s: its connection closes mid-generation
            try:
                httpx.post(server.url + "/v1/completions", json=body, timeout=0.5)
            except httpx.TimeoutException:
                pass
        t = threading.Thread(target=client)
        t.start()
        t.join()
        end = time.time() + 30
        while server.state.backend._active and time.time() < end:
            time.sleep(0.01)
        assert not server.state.backend._active
        assert _count(http, "aborted") == aborted + 1 and _count(http, "finished") == finished
