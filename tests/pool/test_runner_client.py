"""RunnerClient (pool/runner_client.py), the engine client over sequence runners, against scripted runner actors
(no Ray): routing to the least loaded runner with one submit per runner and poll, the runners' deltas handed over
in order (nothing merged), a submit aborted before it was sent never reaches a runner, and a runner that dies:
its DELTA requests come back finished with EngineLost while its FINAL_ONLY ones go, in one submit, to the
survivor with the tokens they had committed. (The real runners: tests/pool/test_pool_runners.py, serve's
tests/serve/test_serve_ray.py.)"""
from types import SimpleNamespace

import pytest

from colibri_dist.errors import PoolError
from colibri_dist.generate.client import DELTA, FINAL_ONLY, EngineLost
from colibri_dist.pool import runner_client


class Dead(Exception):
    pass


class Ref:
    def __init__(self, value=None, exc=None):
        self.value, self.exc = value, exc


class FakeRay:
    @staticmethod
    def wait(refs, num_returns=1, timeout=None):
        return list(refs)[:num_returns], list(refs)[num_returns:]

    @staticmethod
    def get(ref, timeout=None):
        if ref.exc is not None:
            raise ref.exc
        return ref.value


class Call:
    def __init__(self, fn):
        self.remote = fn


class Runner:
    """Answers each poll with the next scripted answer (then empty ones); records submits and aborts."""

    def __init__(self):
        self.submits, self.aborts, self.answers, self.dead = [], [], [], False
        self.submit = Call(self._submit)
        self.abort = Call(lambda rids: self.aborts.extend(rids))
        self.poll = Call(self._poll)
        self.ping = Call(lambda: Ref(exc=Dead()) if self.dead else Ref({}))

    def _submit(self, items):
        self.submits.append([dict(it) for it in items])
        return Ref(True)

    def _poll(self, wait_s=0.2):
        if self.dead:
            return Ref(exc=Dead())
        answer = self.answers.pop(0) if self.answers else {}
        return Ref(dict({"events": [], "results": {}, "outputs": {}, "errors": [], "busy": 1}, **answer))


def _out(rid, tokens, finished=False):
    o = SimpleNamespace(token_ids=list(tokens), text="", logprobs=None, index=0, finish_reason=None)
    return SimpleNamespace(request_id=rid, outputs=[o], finished=finished, error=None, prompt_logprobs=None)


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setattr(runner_client, "ray", FakeRay)
    monkeypatch.setattr(runner_client, "DEAD", (Dead,))
    return runner_client.RunnerClient([Runner(), Runner()])


def test_least_loaded_routing_one_submit_per_runner_and_deltas_in_order(client):
    r0, r1 = client.runners
    for rid in "abc":
        client.submit(rid, [1, 2], None, output_kind=DELTA)
    assert client.owner == {"a": 0, "b": 1, "c": 0} and client.running([("a", 1), ("b", 1), ("c", 1)], 1) == 2
    r0.answers.append({"outputs": {"a": [_out("a", [5]), _out("a", [6, 7])]}})
    r1.answers.append({"outputs": {"b": [_out("b", [9], finished=True)]}})
    got = client.poll(0.01)
    assert [len(r.submits) for r in (r0, r1)] == [1, 1] and [it["rid"] for it in r0.submits[0]] == ["a", "c"]
    assert [(o.request_id, o.outputs[0].token_ids) for o in got] == [("a", [5]), ("a", [6, 7]), ("b", [9])]
    assert client.tokens_by == [3, 1] and client.in_flight == [2, 0] and "b" not in client.owner
    client.submit("d", [3], None)                   # runner 1 is now the least loaded
    assert client.owner["d"] == 1 and client.routed == [2, 2]


def test_an_abort_before_the_submit_went_out_never_reaches_the_runner(client):
    r0, _ = client.runners
    client.submit("a", [1], None)
    client.submit("b", [1], None)
    assert client.abort("a") and not client.abort("a")
    client.poll(0.01)
    assert r0.submits == [] and r0.aborts == [] and client.in_flight == [0, 1]


def test_a_dead_runners_delta_requests_are_lost_and_final_only_ones_resume_on_the_survivor(client):
    r0, r1 = client.runners
    client.submit("s", [1], None, output_kind=DELTA)            # -> runner 0
    client.submit("j1", [2], None, output_kind=FINAL_ONLY)      # -> runner 1
    client.submit("j2", [3], None, output_kind=FINAL_ONLY)      # -> runner 0
    client.submit("j3", [4], None, output_kind=FINAL_ONLY)      # -> runner 1
    r0.answers.append({"events": [("j2", 11, None), ("j2", 12, None)], "busy": 1})
    assert client.poll(0.01) == []
    r0.dead = True
    got = client.poll(0.01)
    assert [(o.request_id, type(o.error)) for o in got] == [("s", EngineLost)] and got[0].finished
    assert "died" in str(got[0].error) and client.lost == [0] and client.dead == {0}
    client.poll(0.01)                                           # sends the resubmission
    assert r1.submits[-1] == [{"rid": "j2", "kind": "generate", "prompt": [3], "params": None,
                               "output_kind": int(FINAL_ONLY), "resume": ([11, 12], None)}]
    assert client.resubmits == 1 and client.resumed_tokens == 2 and set(client.owner) == {"j1", "j2", "j3"}


def test_a_failed_lane_loses_delta_requests_and_raises_for_a_jobs(client):
    r0, r1 = client.runners
    client.submit("s", [1], None, output_kind=DELTA)            # -> runner 0
    client.submit("j", [2], None, output_kind=FINAL_ONLY)       # -> runner 1
    r0.answers.append({"errors": ["RuntimeError: boom"]})
    got = client.poll(0.01)
    assert [(o.request_id, str(o.error)) for o in got] == [("s", "sequence runner 0 failed: RuntimeError: boom")]
    assert r0.aborts == ["s"] and client.dead == set()
    r1.answers.append({"errors": ["RuntimeError: boom"]})
    with pytest.raises(PoolError, match="runner 1 failed: RuntimeError: boom"):
        client.poll(0.01)
