"""Drive an LLMEngine over a list of requests (the tests' stand-in for a caller's loop)."""
from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import LLMEngine, Score
from colibri_dist.generate.outputs import failed_output


def run_all(model, cfg, reqs, engine=None, on_step=None):
    """reqs: [(kind, prompt, params, rid)] -> results in order (Score for score requests)."""
    eng = engine or LLMEngine(model, None, cfg)
    failed = {}
    for kind, prompt, params, rid in reqs:
        try:
            eng.add_request(rid, prompt, params, kind=kind)
        except InvalidArgument as exc:
            failed[rid] = failed_output(rid, None, exc, kind)
    done = {}
    for out in eng.stream(on_step=on_step):
        if out.finished:
            done[out.request_id] = out
    return [failed[rid] if rid in failed else Score.from_output(done[rid]) if kind == "score" else done[rid]
            for kind, _, _, rid in reqs]
