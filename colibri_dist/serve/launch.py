"""Open the model, start the engine thread and serve HTTP: what `colibri serve` and serve() run.

Role in the data flow: ServeConfig -> cfg.engine_args() -> front.open_llm (cd.LLM in process; its MoE layers
on a new Ray pool with --workers N, or on a named pool service with --pool NAME) -> the generation engine over it -> an
EngineBackend thread driving it through the engine client (generate/client.py; the engine in a child process
of its own by default: engine_process.py; or, with --runners M, M sequence runners over that pool: pool/serving.py
RunnerSet) -> ServerState -> build_app -> uvicorn on cfg.host:cfg.port. `Server` is the
in-Python handle (start in a thread, url, stop) the tests and the benchmark use.
"""
import dataclasses
import logging
import os
import threading
import time

from .backend import EngineBackend
from .config import ServeConfig
from .metrics import Metrics
from .state import ModelInfo, ServerState

log = logging.getLogger("colibri.serve")
SWITCH_INTERVAL_S = 0.001


def open_llm(cfg, pool=None):
    """-> (cd.LLM, the Pool its experts run on or None), through front.open_llm(cfg.engine_args()). pool: a
    running Pool to use instead of starting cfg.workers (or attaching cfg.pool). With cfg.runners the LLM
    here only tokenizes and checks requests (the runners generate), so it gets a one-sequence KV cache."""
    from ..front import open_llm as front_open
    args = cfg.engine_args()
    if args.runners:
        args = args.replace(max_num_seqs=1, kv_cache_bytes=None)
    llm = front_open(args, pool)
    return llm, llm.moe


def open_checking_llm(cfg):
    """The LLM of a server whose engine runs elsewhere (an engine process): it only tokenizes, renders chat
    templates and checks requests, so it gets a one-sequence KV cache, no expert store and no pool."""
    from ..front import open_llm as front_open
    args = cfg.engine_args().replace(workers=0, pool=None, runners=0, max_num_seqs=1, kv_cache_bytes=None,
                                     cache_bytes=None, offload_dir=None, offload_compression=None, pool_options={})
    return front_open(args)


def open_runners(cfg, pool):
    """cfg.runners sequence runners over pool (pool/serving.py), or None without --runners."""
    if not cfg.runners:
        return None
    from ..pool.serving import RunnerSet
    llm = {k: v for k, v in cfg.engine_args().llm_kwargs().items() if v is not None}
    return RunnerSet(cfg.model, cfg.runners, pool=pool, llm=llm)


def make_engine(llm):
    """The persistent generation engine over llm (generate/engine.py's LLMEngine, with the model's
    generation_config defaults): the server's own, beside the one llm.generate drives."""
    return llm.new_engine()


def build_state(cfg, llm, pool=None, runner_set=None, remote=None):
    """remote: the RemoteEngine of an engine process (llm then only tokenizes and checks)."""
    from ..generate.prompts import encode_prompt
    from ..generate.params import SamplingParams
    from .admin import ExpertAdmin
    metrics = Metrics()
    if runner_set is not None:              # the runners' engine client: routing, deltas and stats are its own
        backend = EngineBackend(runner_set, metrics, cfg.max_num_seqs, cfg.max_waiting, cfg.overload_status).start()
    elif remote is not None:
        backend = EngineBackend(remote, metrics, cfg.max_num_seqs, cfg.max_waiting, cfg.overload_status,
                                stats_fn=remote.stats,
                                pool_stats_fn=remote.pool_stats if remote.facts["has_pool"] else None).start()
    else:
        backend = EngineBackend(make_engine(llm), metrics, cfg.max_num_seqs, cfg.max_waiting, cfg.overload_status,
                                stats_fn=llm.stats, pool_stats_fn=pool.stats if pool is not None else None).start()
    info = ModelInfo(llm, SamplingParams, encode_prompt, getattr(llm, "generation_defaults", {}),
                     public_name=cfg.model_names[0])
    if remote is not None:
        info.max_seq_len = remote.facts["max_seq_len"]      # the engine's KV budget decides, not this LLM's
    state = ServerState(cfg, backend, info, metrics,
                        admin=ExpertAdmin(llm, remote if remote is not None else pool, backend))
    from .logprobs import TokenText
    state.tok_text = TokenText(llm.tokenizer)
    return state


def imported(cfg):
    """cfg with a .gguf model imported once into its cached container (front.container) before any engine
    process, runner or worker opens it; the served name stays the .gguf file's stem."""
    from ..front import container
    path = container(cfg.model) if os.path.isfile(cfg.model) else cfg.model
    if path == cfg.model:
        return cfg
    return dataclasses.replace(cfg, model=path, served_model_name=cfg.model_names)


class Server:
    """A running server in this process: Server(cfg).start() serves in a thread until stop()."""

    def __init__(self, cfg, llm=None, pool=None):
        """llm / pool: an opened model / a running Pool to serve with (the caller closes them); else
        Server opens what cfg names and closes it in stop()."""
        self.cfg = imported(cfg if isinstance(cfg, ServeConfig) else ServeConfig(**cfg))
        self._owns = llm is None          # an LLM opened here also shuts the pool started for it
        t0 = time.perf_counter()
        self.remote = None
        if llm is None and pool is None and self.cfg.engine_process and not self.cfg.runners:
            from .engine_process import RemoteEngine
            self.remote = RemoteEngine(self.cfg)            # the engine (and its experts) in a child process
            try:
                llm = open_checking_llm(self.cfg)
            except BaseException:
                self.remote.close()
                raise
        elif llm is None:
            llm, pool = open_llm(self.cfg, pool)
        self.llm, self.pool, self.runner_set = llm, pool, None
        try:
            self.runner_set = open_runners(self.cfg, pool)
            self.state = build_state(self.cfg, llm, pool, self.runner_set, self.remote)
        except BaseException:
            self._close_model()
            raise
        self.load_s = time.perf_counter() - t0
        self._server = self._thread = None

    def start(self, timeout=60.0):
        import sys
        import uvicorn
        # the engine thread and the event loop share the GIL: hand it over every 1 ms, not 5 ms, so a busy
        # event loop (32 streams' chunks) delays the next model step less
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        from .app import build_app
        config = uvicorn.Config(build_app(self.state), host=self.cfg.host, port=self.cfg.port,
                                log_level=self.cfg.log_level, access_log=False, lifespan="off",
                                timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="colibri-http", daemon=True)
        self._thread.start()
        deadline = time.time() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.time() > deadline:
                from ..errors import ColibriError
                raise ColibriError(f"the HTTP server did not start on {self.cfg.host}:{self.cfg.port} (see the "
                                   f"line above; a port taken since `colibri serve` checked it?)")
            time.sleep(0.01)
        return self

    @property
    def port(self):
        sock = self._server.servers[0].sockets[0]
        return sock.getsockname()[1]

    @property
    def url(self):
        return f"http://{self.cfg.host}:{self.port}"

    def wait(self):
        self._thread.join()

    def stop(self):
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(15)
        self.state.backend.close()
        self._close_model()

    def _close_model(self):
        if self.runner_set is not None:
            self.runner_set.shutdown()
        if self.remote is not None:
            self.remote.close()
        if self._owns:
            self.llm.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def serve(model, **options):
    """Block serving MODEL (ServeConfig fields as keywords) until interrupted."""
    cfg = ServeConfig(model=str(model), **options)
    server = Server(cfg)
    try:
        server.start()
        log.warning("colibri serve: %s on %s (model %s)", cfg.model, server.url, ", ".join(cfg.model_names))
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
