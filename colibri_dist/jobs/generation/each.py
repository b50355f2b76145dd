"""LLM.generate with a callback per request as it finishes (what the job's partial rows are made of).

Role in the data flow: GenerateKind._run calls `generate_each(llm, prompts, params, on_done, ...)`. On a
cd.LLM it runs generate/api.generate over the LLM's own persistent llm_engine, seen through a tap whose
step() hands every finished RequestOutput to on_done(index in `prompts`, output) before the call returns
them all (the same objects LLM.generate returns, so the same bytes). An LLM without llm_engine (a test's
fake) runs llm.generate and on_done is never called.
"""
import inspect


def generate_each(llm, prompts, params, on_done=None, **callbacks):
    engine = getattr(llm, "llm_engine", None) if on_done is not None else None
    if engine is None:
        accepted = inspect.signature(llm.generate).parameters
        per_row = {**callbacks, "errors": "return", "use_tqdm": False}   # a bad row is its own error; no bar
        return llm.generate(prompts, params, **{k: v for k, v in per_row.items() if v is not None and k in accepted})
    from ...generate.api import generate
    return generate(llm, llm.tokenizer, prompts, params, llm.scheduler_config, callbacks.get("on_token"),
                    list(range(len(prompts))), callbacks.get("on_step"), engine=_Tap(engine, on_done),
                    errors="return")


class _Tap:
    """An LLMEngine whose step() also reports each finished output (request ids are prompt indices)."""

    def __init__(self, engine, on_done):
        self._engine, self._on_done = engine, on_done

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def step(self, *args, **kwargs):
        outs = self._engine.step(*args, **kwargs)
        for out in outs:
            if out.finished:
                self._on_done(out.request_id, out)
        return outs
