"""EngineBackend: one thread drives the generation engine through the engine client; each request reads its
outputs from an asyncio queue.

Role in the data flow: the HTTP layer (app.py, in the event loop) calls `submit` (-> a RequestStream),
`abort` and `exclusive`; the driver thread is the only caller of the engine client (generate/client.py:
submit / abort / poll): it takes new requests and aborts from an inbox between polls, polls, and hands
each RequestOutput (a DELTA: only what is new) to its request's queue with loop.call_soon_threadsafe.
The client is an InProcessClient over this process's LLMEngine or the engine process's RemoteEngine
(engine_process.py), or the RunnerClient of M Ray sequence runners (pool/serving.py RunnerSet: the runner
is chosen there, least loaded). The HTTP layer never touches scheduler internals.

Admission: `submit` refuses (APIError 429 or 503, the --overload-status flag) when more than
`max_waiting` requests already wait beyond the running batch(es). `exclusive(fn)` drains: requests admitted
before it finish on the model as it was, new ones wait in the inbox, fn runs on the driver thread with
nothing in flight, then the inbox is admitted (the hot-add/remove rule of the admin endpoint). A request
lost with its engine (a dead runner: EngineLost) is answered 503; the other requests go on.
"""
import asyncio
import logging
import threading
import time
from collections import deque

from ..generate.client import DELTA, EngineLost, InProcessClient
from .errors import APIError

log = logging.getLogger("colibri.serve")
POLL_TIMEOUT_S = 0.01      # how long a poll of Ray runners waits for outputs before the inbox is looked at again


class RequestStream:
    """What the HTTP side holds for one engine request: its queue of RequestOutput (or an Exception)."""

    def __init__(self, request_id, prompt_len, loop, queue=None, n=1):
        self.request_id, self.prompt_len, self.loop = request_id, prompt_len, loop
        self.n = n                               # its samples: the sequences it takes in the batch
        self.queue = queue if queue is not None else asyncio.Queue()
        self.t_arrival = time.perf_counter()
        self.t_first = None
        self.tokens = 0
        self.done = False

    async def get(self):
        return await self.queue.get()


class EngineBackend:
    deltas = True            # every client hands over only what is new (RequestOutputKind.DELTA): a slow reader's
                             # queue holds O(tokens), never a copy of everything so far per step

    def __init__(self, engine, metrics, max_num_seqs, max_waiting, overload_status=429, stats_fn=None,
                 pool_stats_fn=None):
        """engine: an engine client (generate/client.py), or an engine (LLMEngine, RemoteEngine) to drive
        through an InProcessClient with these stats_fn / pool_stats_fn."""
        self.client = engine if hasattr(engine, "poll") else InProcessClient(engine, stats_fn, pool_stats_fn)
        self.metrics = metrics
        self.max_num_seqs, self.max_waiting, self.overload_status = max_num_seqs, max_waiting, overload_status
        self.capacity = self.client.engines * max_num_seqs    # requests that can run at once
        self.lock = self.client.lock            # held around every engine call (poll, submit, abort, stats)
        self._inbox, self._aborts, self._control = deque(), deque(), deque()
        self._active = {}                       # request id -> RequestStream (submitted to the client)
        self._wake = threading.Event()
        self._stop = False
        self.steps = 0
        self.last_error = None
        self._thread = threading.Thread(target=self._loop, name="colibri-engine", daemon=True)

    @property
    def engine(self):
        """The in-process engine the client steps (None for Ray runners)."""
        return getattr(self.client, "engine", None)

    def start(self):
        self._thread.start()
        return self

    @property
    def alive(self):
        return self._thread.is_alive() and not self._stop and self.client.alive

    # ------------------------------------------------------------ HTTP side (event loop thread)
    def submit(self, request_id, prompt, params, prompt_len, queue=None):
        if not self.alive:
            raise APIError(503, "the engine is not running", code="engine_stopped")
        running, waiting = self.load()
        would_wait = waiting > 0 or running >= self.capacity
        if would_wait and waiting >= self.max_waiting:
            self.metrics.finished("rejected")
            raise APIError(self.overload_status, f"the server is at capacity: {running} requests running and "
                           f"{waiting} waiting (bound --max-waiting {self.max_waiting}); retry later",
                           code="queue_full")
        stream = RequestStream(request_id, prompt_len, asyncio.get_running_loop(), queue, n=_samples(params))
        self._inbox.append((stream, prompt, params))
        self._wake.set()
        return stream

    def abort(self, request_id):
        self._aborts.append(request_id)
        self._wake.set()

    async def exclusive(self, fn):
        """Run fn() on the driver thread once every request admitted so far has finished."""
        fut = asyncio.get_running_loop().create_future()
        self._control.append((fn, fut, fut.get_loop()))
        self._wake.set()
        return await fut

    def load(self):
        """(running, waiting) requests: oldest first, those whose samples fit max_num_seqs sequences of an
        engine (a request of n samples counts once and takes n; client.running), and the rest (queued + inbox)."""
        ns = [(rid, s.n) for rid, s in list(self._active.items())] + [(None, item[0].n) for item in list(self._inbox)]
        running = self.client.running(ns, self.max_num_seqs)
        return running, len(ns) - running

    def model_stats(self):
        """LLM.stats() (and the pool's) read between two engine steps, or the runners' sums and figures."""
        return self.client.stats()

    def close(self, timeout=10.0):
        self._stop = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # ------------------------------------------------------------ driver thread
    def _loop(self):
        while not self._stop:
            self._wake.clear()
            self._take_aborts()
            draining = bool(self._control)
            if draining and not self._active:
                self._run_control()
                continue
            if not draining:
                self._take_inbox()
            if self._active:
                self._step()
            else:
                self._wake.wait(0.5)
        self._fail_all(APIError(503, "the server is shutting down", code="shutdown"))

    def _take_inbox(self):
        while self._inbox and not self._control:         # a pending change stops admissions at once
            stream, prompt, params = self._inbox[0]      # counted as waiting until it is submitted
            try:
                self.client.submit(stream.request_id, prompt, params, output_kind=DELTA)
            except Exception as exc:
                self._inbox.popleft()
                self._deliver(stream, APIError(503, str(exc), code="engine_stopped")
                              if isinstance(exc, EngineLost) else exc)
                self.metrics.finished("error")
                continue
            self._active[stream.request_id] = stream
            self._inbox.popleft()

    def _take_aborts(self):
        while self._aborts:
            rid = self._aborts.popleft()
            for i, (stream, _, _) in enumerate(self._inbox):
                if stream.request_id == rid:
                    del self._inbox[i]
                    self.metrics.finished("aborted")
                    break
            stream = self._active.pop(rid, None)
            if stream is not None:
                self.client.abort(rid)          # where it runs: its KV blocks are freed
                self.metrics.finished("aborted", time.perf_counter() - stream.t_arrival, stream.prompt_len)

    def _run_control(self):
        fn, fut, loop = self._control.popleft()
        try:
            with self.lock:
                result = fn()
            loop.call_soon_threadsafe(_resolve, fut, result, None)
        except Exception as exc:
            loop.call_soon_threadsafe(_resolve, fut, None, exc)

    def _step(self):
        try:
            outs = self.client.poll(POLL_TIMEOUT_S)
        except Exception as exc:             # the batch is lost: tell every request, free everything
            log.exception("engine step failed")
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._fail_all(APIError(500, f"the engine failed: {self.last_error}", code="engine_error"))
            return
        self.steps += 1
        now = time.perf_counter()
        batch = []
        for out in outs:
            stream = self._active.get(out.request_id)
            if stream is None:
                continue                     # aborted meanwhile
            batch.append((stream, self._account(stream, out, now)))
            if out.finished:
                del self._active[out.request_id]
        self._deliver_many(batch)

    def _account(self, stream, out, now):
        """Count the output's tokens; -> what goes to the request's queue (a lost request: a 503)."""
        if out.error is not None and isinstance(out.error, EngineLost):
            self.last_error = str(out.error)
            self.metrics.finished("error")
            return APIError(503, str(out.error), code="engine_error")
        n = stream.tokens + sum(len(o.token_ids) for o in out.outputs)
        if n > stream.tokens:
            if stream.t_first is None:
                stream.t_first = now
                self.metrics.first_token(now - stream.t_arrival)
            self.metrics.tokens(n - stream.tokens, now)
            stream.tokens = n
        if out.finished:
            self.metrics.finished("finished" if out.error is None else "error", now - stream.t_arrival,
                                  stream.prompt_len)
        return out

    def _deliver(self, stream, item):
        try:
            stream.loop.call_soon_threadsafe(stream.queue.put_nowait, item)
        except RuntimeError:                 # its event loop is closed: nobody is listening
            pass

    def _deliver_many(self, pairs):
        """A step's outputs: one wake-up of each event loop per step, not one per request."""
        by_loop = {}
        for stream, item in pairs:
            by_loop.setdefault(stream.loop, []).append((stream.queue, item))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:             # that event loop is closed: nobody is listening
                pass

    def _fail_all(self, exc):
        for rid, stream in list(self._active.items()):
            try:
                self.client.abort(rid)
            except Exception:
                pass
            self._deliver(stream, exc)
            self.metrics.finished("error")
        self._active.clear()
        while self._inbox:
            self._deliver(self._inbox.popleft()[0], exc)


def _put_all(items):
    for queue, item in items:
        queue.put_nowait(item)


def _samples(params):
    n = params.get("n", 1) if isinstance(params, dict) else getattr(params, "n", 1)
    return n if isinstance(n, int) and n >= 1 else 1


def _resolve(fut, result, exc):
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
