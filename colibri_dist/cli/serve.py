"""`colibri serve MODEL.colibri`: the OpenAI-compatible HTTP server (colibri_dist.serve), like `vllm serve`.

Role: argv -> ServeConfig (every check, including the non-loopback-without-key refusal, is there) ->
serve.launch.Server (blocks until Ctrl-C or SIGTERM: both drain and exit 0, serve/signals.py; a busy --port is
one line before the model loads), or with --ray-serve serve.ray_serve.run (Ray Serve replicas).
"""
import os

from .engine_flags import add_engine_flags

API_KEY_ENV = "COLIBRI_API_KEY"

ENGINE_FLAGS = ("workers", "pool", "threads", "max_num_seqs", "max_num_batched_tokens", "prefill_chunk", "w8a8",
                "kv_cache_bytes", "kv_cache_dtype", "max_seq_len", "cache_bytes", "offload_dir", "offload_compression",
                "policy", "max_logprobs")


def register(subparsers):
    from ..serve import reasoning, tools       # the parser tables (plain Python: no [serve] extra needed)
    p = subparsers.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                              description="Serve MODEL on /v1/completions, /v1/chat/completions, /v1/models, "
                                          "/health, /metrics, /tokenize, /detokenize (vLLM's routes).")
    p.add_argument("model", metavar="MODEL", help=".colibri model")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs "
                                                        "--api-key)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                   help="model name(s) clients send (default: the file name without .colibri)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="require 'Authorization: Bearer KEY' (the process list shows it to local users: prefer "
                        "--api-key-file or $COLIBRI_API_KEY)")
    p.add_argument("--api-key-file", default=None, metavar="FILE", help="read the API key from FILE's first line")
    p.add_argument("--runners", type=int, default=0, metavar="M",
                   help="persistent engines (Ray sequence runners over the shared workers) the requests are spread "
                        "over; needs --workers or --pool (0 = one engine in this process)")
    add_engine_flags(p, ENGINE_FLAGS)
    p.add_argument("--max-waiting", type=int, default=256, metavar="N",
                   help="requests queued beyond the batch before new ones are refused (256)")
    p.add_argument("--overload-status", type=int, choices=(429, 503), default=429,
                   help="status of a refused request when the queue is full (429)")
    p.add_argument("--max-body-bytes", type=int, default=4 << 20, metavar="N")
    p.add_argument("--body-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="answer 408 when a request's body has not all arrived this long after its headers (30)")
    p.add_argument("--allowed-hosts", nargs="+", default=(), metavar="NAME",
                   help="a loopback bind also answers these Host names (default: loopback names only, against "
                        "DNS rebinding)")
    p.add_argument("--allowed-origins", nargs="+", default=(), metavar="ORIGIN",
                   help="a loopback bind also answers pages of these origins, e.g. http://myapp.local:3000 "
                        "('*': any; default: loopback pages only)")
    p.add_argument("--max-prompts", type=int, default=2048, metavar="N",
                   help="most prompts in one /v1/completions request (2048)")
    p.add_argument("--max-tokens-limit", type=int, default=None, metavar="N",
                   help="largest max_tokens accepted (default: the model's context)")
    p.add_argument("--seed", type=int, default=0, help="base seed of requests without one")
    p.add_argument("--disable-any-whitespace", action="store_true",
                   help="structured outputs: JSON without free whitespace between tokens (compact; vLLM's "
                        "structured_outputs_config.disable_any_whitespace)")
    p.add_argument("--engine-in-process", dest="engine_process", action="store_false",
                   help="step the engine in this process's thread (default: a process of its own, so HTTP load "
                        "slows it less)")
    p.add_argument("--tool-call-parser", default=None, choices=sorted(tools.PARSERS),
                   help="how the model writes tool calls (default: its family's: qwen3_moe/qwen2_moe hermes, "
                        "deepseek_v3 deepseek_v3, glm4_moe glm45; others: tool_choice auto is refused)")
    p.add_argument("--reasoning-parser", default=None, choices=sorted(reasoning.PARSERS),
                   help="split <think>...</think> off as reasoning_content (default: none)")
    p.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    r = p.add_argument_group("Ray Serve")
    r.add_argument("--ray-serve", action="store_true", help="run as a Ray Serve application (replicas)")
    r.add_argument("--min-replicas", type=int, default=1, metavar="N")
    r.add_argument("--max-replicas", type=int, default=1, metavar="N")
    r.add_argument("--ray-address", default=None, help="Ray cluster (default: a local Ray on loopback)")
    p.set_defaults(func=main)


def api_key_of(args):
    """--api-key, else --api-key-file's first line, else $COLIBRI_API_KEY (vLLM reads VLLM_API_KEY), else None."""
    from ..errors import InvalidArgument
    if args.api_key is not None and args.api_key_file is not None:
        raise InvalidArgument("--api-key and --api-key-file exclude each other", parameter="api_key_file")
    if args.api_key_file is not None:
        try:
            with open(args.api_key_file, encoding="utf-8") as fh:
                key = fh.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgument(f"--api-key-file {args.api_key_file}: cannot read it ({exc})",
                                  parameter="api_key_file") from None
        if not key:
            raise InvalidArgument(f"--api-key-file {args.api_key_file}: its first line is empty",
                                  parameter="api_key_file")
        return key
    return args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None


def config_from_args(args):
    """ServeConfig of the flags (its own checks speak of the flags; cfg.engine_args() checks the engine's)."""
    from ..serve.config import ServeConfig
    own = ("threads", "max_num_seqs", "max_num_batched_tokens", "w8a8", "workers", "pool")
    return ServeConfig(model=args.model, host=args.host, port=args.port,
                       served_model_name=tuple(args.served_model_name or ()), api_key=api_key_of(args),
                       runners=args.runners, max_waiting=args.max_waiting, overload_status=args.overload_status,
                       max_body_bytes=args.max_body_bytes, body_timeout_s=args.body_timeout,
                       max_tokens_limit=args.max_tokens_limit,
                       max_prompts=args.max_prompts, seed=args.seed, allowed_hosts=tuple(args.allowed_hosts),
                       allowed_origins=tuple(args.allowed_origins),
                       llm_kwargs={k: getattr(args, k) for k in ENGINE_FLAGS if k not in own},
                       log_level=args.log_level, engine_process=args.engine_process,
                       disable_any_whitespace=args.disable_any_whitespace,
                       tool_call_parser=args.tool_call_parser, reasoning_parser=args.reasoning_parser,
                       **{k: getattr(args, k) for k in own})


def main(args):
    import os

    import fastapi  # noqa: F401  (the [serve] extra: missing is said before the model loads, cli.EXTRAS)
    import uvicorn  # noqa: F401
    from ..errors import InvalidArgument
    cfg = config_from_args(args)
    if not os.path.exists(cfg.model):
        raise InvalidArgument(f"{cfg.model}: no such model file")
    from ..serve.signals import check_port, stop_on_sigterm
    check_port(cfg.host, cfg.port)
    stop_on_sigterm()                          # SIGTERM during the model load stops too
    from ..serve.launch import imported
    cfg = imported(cfg)                        # a .gguf: imported once here, before any replica opens it
    if args.ray_serve:
        from ..serve.ray_serve import run
        return run(cfg, min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                   ray_address=args.ray_address)
    from ..serve.launch import Server
    try:
        server = Server(cfg)
    except KeyboardInterrupt:
        return 0
    try:
        server.start()
        stop_on_sigterm()                      # again: ray.init (--workers in process, --runners) set its own
        print(f"colibri serve: {cfg.model} as {', '.join(cfg.model_names)} on {server.url}/v1 "
              f"(model load {server.load_s:.2f} s); Ctrl-C or SIGTERM stops", flush=True)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
