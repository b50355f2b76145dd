"""INTERIM (until generate/engine.py lands): the LLMEngine surface over today's Scheduler.

add_request / abort / step / has_unfinished with vLLM-shaped cumulative outputs, so the server and its
tests run before the persistent engine exists. Deleted when the engine branch is merged.
"""
from types import SimpleNamespace


class InterimEngine:
    def __init__(self, llm):
        from ..generate.scheduler import Scheduler
        self.llm = llm
        self.sched = Scheduler(llm, llm.scheduler_config, llm.tokenizer)
        self.by_rid = {}

    def add_request(self, request_id, prompt, params):
        idx = self.sched.add_generate(list(prompt), params, request_id)
        req = self.sched.requests[idx]
        if req.result is not None and req.result.error is not None:
            raise req.result.error
        self.by_rid[request_id] = req

    def abort(self, request_id):
        req = self.by_rid.pop(request_id, None)
        if req is None:
            return
        if req in self.sched.waiting:
            self.sched.waiting.remove(req)
        if req in self.sched.running:
            self.sched.running.remove(req)
            if req.seq is not None:
                self.llm.release(req.seq)
                req.seq = None

    def has_unfinished(self):
        return bool(self.sched.waiting or self.sched.running)

    def step(self):
        touched = []
        done = self.sched.step(lambda ev: touched.append(ev.index))
        reqs = {i: self.sched.requests[i] for i in touched}
        reqs.update({r.index: r for r in done})
        outs = [_output(r) for r in reqs.values()]
        for r in done:
            self.by_rid.pop(r.request_id, None)
        return outs


def _output(req):
    res = req.result
    finished = res is not None
    text = res.text if finished else req.detok.text[:req.streamed]
    lps = list(req.logprobs) if req.params.logprobs > 0 else None
    comp = SimpleNamespace(index=0, text=text, token_ids=list(req.output), logprobs=lps,
                           finish_reason=res.finish_reason if finished else None,
                           stop_reason=res.stop_reason if finished else None)
    return SimpleNamespace(request_id=req.request_id, prompt_token_ids=list(req.prompt), prompt_logprobs=None,
                           outputs=[comp], finished=finished, error=res.error if finished else None)
