"""ServeConfig: every knob of `colibri serve`, validated once (CLI flags and Python keywords alike).

Role in the data flow: cli/serve.py and colibri_dist.serve.serve(...) build one ServeConfig; launch.py
opens the model and the engine from it, app.py reads the limits and the key. The security rules live
here: the default host is loopback, and a host that is not loopback without an API key is refused.
"""
import ipaddress
from dataclasses import dataclass, field, fields

from . import reasoning, tools
from ..errors import InvalidArgument

LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class ServeConfig:
    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: tuple = ()          # names clients may send as "model" (default: the file's stem)
    api_key: str | None = None
    workers: int = 0                       # expert workers on a Ray pool (0 = in-process experts)
    pool: str | None = None                # attach to this named pool service instead of starting workers
    runners: int = 0                       # persistent engines (pool sequence runners) the server drives;
                                           # 0 = one engine in this process (needs --workers or --pool when > 0)
    threads: int | None = None
    max_num_seqs: int = 64                 # sequences decoding at once (the engine's batch)
    max_num_batched_tokens: int = 2048
    max_waiting: int = 256                 # requests queued beyond the batch before new ones are refused
    overload_status: int = 429             # 429 (Too Many Requests) or 503 (Service Unavailable)
    max_body_bytes: int = 4 << 20          # request bodies above this are refused with 413
    max_admin_body_bytes: int = 256 << 20  # expert uploads to /admin/experts
    body_timeout_s: float = 30.0           # a request body not all there this long after its headers: 408
    max_tokens_limit: int | None = None    # largest max_tokens accepted (None = the model's context)
    max_n: int = 16                        # largest `n` (samples per prompt) accepted
    max_prompts: int = 2048                # most prompts in one /v1/completions request (OpenAI's batch bound)
    allowed_hosts: tuple = ()              # a loopback bind answers these Host names too (DNS rebinding guard)
    allowed_origins: tuple = ()            # ... and requests from pages of these origins ("*": any)
    seed: int = 0                          # base seed of requests that give none
    w8a8: bool = True                      # int8/int4 weights x int8 activations; False: --weights-only (exact)
    llm_kwargs: dict = field(default_factory=dict)   # any further EngineArgs field (kv_cache_bytes, cache_bytes, ...)
    pool_kwargs: dict = field(default_factory=dict)  # any further PoolConfig field of a pool started here (hooks, ...)
    log_level: str = "warning"
    disable_any_whitespace: bool = False   # structured JSON outputs without free whitespace between tokens
                                           # (vLLM's structured_outputs_config.disable_any_whitespace)
    tool_call_parser: str | None = None    # tools.PARSERS row (hermes, deepseek_v3, glm45); None: the model family's
    reasoning_parser: str | None = None    # reasoning.PARSERS row (deepseek_r1, qwen3); None: no reasoning split
    engine_process: bool = True            # the engine steps in a process of its own (engine_process.py) when
                                           # the server opens the model itself and runs no --runners

    def __post_init__(self):
        for name, lo in (("port", 0), ("workers", 0), ("runners", 0), ("max_num_seqs", 1), ("max_num_batched_tokens", 1),
                         ("max_waiting", 0), ("max_body_bytes", 1), ("max_admin_body_bytes", 1), ("max_n", 1), ("max_prompts", 1),
                         ("seed", 0)):
            _check_int(name, getattr(self, name), lo)
        if not isinstance(self.disable_any_whitespace, bool):
            raise InvalidArgument(f"disable_any_whitespace must be True or False, got {self.disable_any_whitespace!r}")
        t = self.body_timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < float("inf"):
            raise InvalidArgument(f"--body-timeout must be a positive number of seconds, got {t!r}",
                                  parameter="body_timeout_s", value=t)
        if not isinstance(self.w8a8, bool):
            raise InvalidArgument(f"w8a8 must be True or False, got {self.w8a8!r}")
        if self.port > 65535:
            raise InvalidArgument(f"--port must be in [0, 65535], got {self.port}")
        if self.max_tokens_limit is not None:
            _check_int("max_tokens_limit", self.max_tokens_limit, 1)
        if self.overload_status not in (429, 503):
            raise InvalidArgument(f"--overload-status must be 429 or 503, got {self.overload_status!r}")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key.strip()):
            raise InvalidArgument("--api-key must be a non-empty string")
        if self.api_key is not None:
            bad = next((i for i, ch in enumerate(self.api_key) if not "!" <= ch <= "~"), None)
            if bad is not None:             # an HTTP header carries it: printable ASCII, no spaces
                raise InvalidArgument(f"the API key must be printable ASCII without spaces (clients send it in an "
                                      f"HTTP header); character {bad + 1} is {self.api_key[bad]!r}",
                                      parameter="api_key")
        names = (self.served_model_name,) if isinstance(self.served_model_name, str) else tuple(self.served_model_name)
        if not all(isinstance(n, str) and n for n in names):
            raise InvalidArgument(f"--served-model-name must be non-empty strings, got {self.served_model_name!r}")
        object.__setattr__(self, "served_model_name", names)
        for name in ("allowed_hosts", "allowed_origins"):
            v = getattr(self, name)
            v = (v,) if isinstance(v, str) else tuple(v or ())
            if not all(isinstance(x, str) and x for x in v):
                raise InvalidArgument(f"--{name.replace('_', '-')} must be non-empty strings, got {v!r}",
                                      parameter=name, value=v)
            object.__setattr__(self, name, v)
        _check_choice("tool_call_parser", self.tool_call_parser, tools.PARSERS)
        _check_choice("reasoning_parser", self.reasoning_parser, reasoning.PARSERS)
        if not is_loopback(self.host) and self.api_key is None:
            raise InvalidArgument(f"--host {self.host} is not a loopback address: anyone who can reach it could use "
                                  f"the model; pass --api-key KEY, --api-key-file FILE or $COLIBRI_API_KEY (or bind 127.0.0.1)")
        try:
            self.engine_args()             # the engine settings' own checks (where the experts run, ...), at once
        except InvalidArgument as exc:     # named by the flag, as this class's own checks are
            flag = f"--{(exc.parameter or 'engine').replace('_', '-')}"
            raise InvalidArgument(f"{flag}: {exc}", parameter=exc.parameter, value=exc.value) from None

    def engine_args(self):
        """The EngineArgs of the server's engine(s) and experts (front.open_llm opens them)."""
        from ..config.engine_args import EngineArgs
        pool = dict(self.pool_kwargs)
        store = {k: pool.pop(k) for k in ("cache_bytes", "offload_dir", "policy") if k in pool}
        if "compression" in pool:
            store["offload_compression"] = pool.pop("compression")
        engine = dict(dict(model=self.model, threads=self.threads, max_num_seqs=self.max_num_seqs, seed=self.seed,
                           max_num_batched_tokens=self.max_num_batched_tokens, w8a8=self.w8a8,
                           workers=self.workers, pool=self.pool, runners=self.runners, pool_options=pool),
                      **store)
        unknown = sorted(set(self.llm_kwargs) - {f.name for f in fields(EngineArgs)})
        if unknown:
            raise InvalidArgument(f"llm_kwargs {unknown} are not engine settings (EngineArgs fields)",
                                  parameter="llm_kwargs")
        engine.update(self.llm_kwargs)
        return EngineArgs(**engine)

    @property
    def model_names(self):
        if self.served_model_name:
            return self.served_model_name
        import os
        return (os.path.splitext(os.path.basename(self.model.rstrip("/")))[0] or "colibri",)


def is_loopback(host):
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_choice(name, v, table):
    if v is not None and v not in table:
        raise InvalidArgument(f"--{name.replace('_', '-')} must be one of {', '.join(sorted(table))}, got {v!r}",
                              parameter=name, value=v)


def _check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise InvalidArgument(f"--{name.replace('_', '-')} must be an integer >= {lo}, got {v!r}")
