"""The server's generation engine in a process of its own (vLLM's engine-core split): HTTP load slows it less.

Role in the data flow: with ServeConfig.engine_process (the default of a server that opens its own model),
launch.py starts a RemoteEngine: a spawned child process opens the model through front.open_llm (the
experts in it, or on the pool it starts or attaches), builds the LLMEngine, and answers one call at a time
over a pipe. EngineBackend drives a RemoteEngine through an InProcessClient exactly as an LLMEngine
(add_request / abort / step: the same admission, abort and drain rules), plus the model
calls the server makes (stats, the pool's stats, expert admin). While the child steps, the HTTP process
holds no lock the child needs and the child shares no GIL with the event loop. Outputs cross the pipe as
the engine's deltas (RequestOutputKind.DELTA), pickled; a child that dies fails the call in flight with an
EngineDead error, which the engine thread treats as any failed step, and makes /health and new requests 503.
"""
import multiprocessing
import pickle
import threading

from ..errors import ColibriError

START_TIMEOUT_S = 600.0           # opening a large model (and starting a pool) in the child


class EngineDead(ColibriError):
    """The engine process exited (killed, out of memory, a crash in the C core)."""


class RemoteEngine:
    def __init__(self, cfg):
        """cfg: the ServeConfig; the child opens cfg.engine_args() itself (nothing of the model crosses)."""
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(cfg, child), name="colibri-engine", daemon=True)
        self._proc.start()
        child.close()
        self._lock = threading.Lock()
        self.facts = self._reply("start", START_TIMEOUT_S)    # vocab_size, max_seq_len, has_pool

    # ---- what the engine client (generate/client.py InProcessClient) calls on an engine
    def add_request(self, request_id, prompt, params=None, output_kind=None):
        return self._call("add_request", request_id, prompt, params, output_kind=output_kind)

    def abort(self, request_id):
        return self._call("abort", request_id)

    def step(self):
        return self._call("step")

    # ---- the model calls of /metrics and the expert admin routes
    def stats(self):
        return self._call("stats")

    def pool_stats(self):
        return self._call("pool_stats")

    def add_expert(self, layer, weights, router_row, bias=0.0):
        return self._call("add_expert", layer, weights, router_row, bias)

    def remove_expert(self, layer, expert):
        return self._call("remove_expert", layer, expert)

    def list_experts(self):
        return self._call("list_experts")

    @property
    def alive(self):
        return self._proc.is_alive()

    def close(self, timeout=15.0):
        try:
            with self._lock:
                self._conn.send(("close", (), {}))
        except (OSError, EOFError):
            pass
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()

    def _call(self, op, *args, **kwargs):
        with self._lock:
            try:
                self._conn.send((op, args, kwargs))
            except (OSError, EOFError, BrokenPipeError):
                raise EngineDead(self._dead_text()) from None
            return self._reply(op, None)

    def _reply(self, op, timeout):
        if timeout is not None and not self._conn.poll(timeout):
            self._proc.kill()
            raise EngineDead(f"the engine process did not answer {op} within {timeout:.0f} s")
        try:
            status, value = self._conn.recv()
        except (OSError, EOFError):
            raise EngineDead(self._dead_text()) from None
        if status == "error":
            raise value
        return value

    def _dead_text(self):
        self._proc.join(1)
        return f"the engine process exited (exit code {self._proc.exitcode})"


def _serve(cfg, conn):
    """The child: open the model, then answer calls until "close" or the parent goes away."""
    from .signals import ignore_stop_signals
    ignore_stop_signals()                     # the parent drains and closes it (serve/signals.py)
    try:
        from ..front import open_llm
        llm = open_llm(cfg.engine_args())
        pool, engine = llm.moe, llm.new_engine()
    except BaseException as exc:
        conn.send(("error", _portable(exc)))
        return
    target = pool if pool is not None else llm.executor
    ops = {"add_request": engine.add_request, "abort": engine.abort, "step": engine.step, "stats": llm.stats,
           "pool_stats": pool.stats if pool is not None else (lambda: None),
           "add_expert": target.add_expert, "remove_expert": target.remove_expert,
           "list_experts": target.list_experts}
    conn.send(("ok", {"vocab_size": llm.vocab_size, "max_seq_len": llm.max_seq_len, "has_pool": pool is not None}))
    try:
        _answer(conn, ops)
    finally:
        llm.close()


def _answer(conn, ops):
    while True:
        try:
            op, args, kwargs = conn.recv()
        except (EOFError, OSError):           # the server went away
            return
        if op == "close":
            return
        try:
            reply = ("ok", ops[op](*args, **kwargs))
        except BaseException as exc:
            reply = ("error", _portable(exc))
        conn.send(reply)


def _portable(exc):
    """The exception itself when it pickles (colibri errors do), else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
