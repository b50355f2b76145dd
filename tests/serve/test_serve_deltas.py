"""The server's engine hands over deltas: a reader that stops reading leaves each token queued once.

Before, the backend queued every step's cumulative RequestOutput, so a stream nobody read held
1 + 2 + ... + max_tokens token ids (and their logprobs) at its end: O(max_tokens^2) memory."""
import asyncio
import time

import colibri_dist as cd
from colibri_dist.generate import SamplingParams
from colibri_dist.serve.backend import EngineBackend
from colibri_dist.serve.metrics import Metrics

MAX_TOKENS = 48


def _unread_stream(llm, params):
    """Submit one request, never read its queue until it finished; -> every item queued for it."""
    async def run():
        backend = EngineBackend(llm.new_engine(), Metrics(), 4, 4).start()
        try:
            queue = asyncio.Queue()
            backend.submit("r", [5, 6, 7, 8], params, 4, queue=queue)
            deadline = time.monotonic() + 60
            while (backend._active or backend._inbox) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            items = []
            while not queue.empty():
                items.append(queue.get_nowait())
            return items, backend.metrics
        finally:
            backend.close()
    return asyncio.run(run())


def test_an_unread_stream_queues_each_token_once_and_the_deltas_join_to_the_answer(demo_model):
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True, logprobs=3)
    with cd.LLM(demo_model) as llm:
        items, _ = _unread_stream(llm, params)
        ref = llm.generate([[5, 6, 7, 8]], params)[0].outputs[0]
    assert items and items[-1].finished and all(not isinstance(i, BaseException) for i in items)
    outs = [i.outputs[0] for i in items]
    assert sum(len(o.token_ids) for o in outs) == MAX_TOKENS                 # not MAX_TOKENS * (MAX_TOKENS + 1) / 2
    assert sum(len(o.logprobs) for o in outs) == MAX_TOKENS
    assert [t for o in outs for t in o.token_ids] == list(ref.token_ids)     # the same bits as LLM.generate
    assert "".join(o.text for o in outs) == ref.text
    assert [lp for o in outs for lp in o.logprobs] == list(ref.logprobs)
