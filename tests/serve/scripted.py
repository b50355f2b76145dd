"""A test-only stand-in for the model's words: wraps a running server's backend so that a request is
answered with scripted text pieces (each one engine output, as the engine's DELTA outputs come) instead
of what the random model says. Everything after the backend (trackers, chat_output, SSE, JSON) is the
server's own, so the openai client sees exactly what a model writing that text would give it."""
from types import SimpleNamespace


class Scripted:
    def __init__(self, backend, pieces, finish="stop"):
        self.backend, self.pieces, self.finish = backend, list(pieces), finish
        self.params = []                       # the SamplingParams of every submitted request

    def submit(self, request_id, prompt, params, prompt_len, queue=None):
        assert self.backend.deltas            # the outputs below are deltas, as the engine's are
        self.params.append(params)
        for i, piece in enumerate(self.pieces):
            last = i == len(self.pieces) - 1
            out = SimpleNamespace(index=0, text=piece, token_ids=[0], logprobs=None,
                                  finish_reason=self.finish if last else None, stop_reason=None)
            queue.put_nowait(SimpleNamespace(request_id=request_id, outputs=[out], finished=last,
                                             prompt_logprobs=None, error=None))


def script(monkeypatch, server, pieces, finish="stop"):
    fake = Scripted(server.state.backend, pieces, finish)
    monkeypatch.setattr(server.state.backend, "submit", fake.submit)
    return fake


def recording(monkeypatch, server):
    """The backend's submit, passing through, recording each request's SamplingParams."""
    seen, real = [], server.state.backend.submit

    def submit(request_id, prompt, params, prompt_len, queue=None):
        seen.append(params)
        return real(request_id, prompt, params, prompt_len, queue=queue)
    monkeypatch.setattr(server.state.backend, "submit", submit)
    return seen
