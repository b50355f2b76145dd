"""The front door: open a model with its experts where EngineArgs say, or attach to a running pool.

Role in the data flow: every entry point (the CLI, the server and Ray Serve replicas, every job kind, Ray
Data actors, stress) builds one config.EngineArgs and calls here:
    open_llm(args)      -> cd.LLM whose MoE layers run in process (args' expert store), on a Ray pool of
                           args.workers started here, or on the running pool args.pool; closing the LLM
                           shuts what was started for it
    open_experts(args)  -> the MoE executor alone (the in-process MoeExecutor or that pool): moe-layer jobs
    open_pool(args)     -> the pool of args (None in process)
    container(model)    -> the .colibri to open for `model`: itself, or a .gguf's cached import
                           (format/gguf_cache.py: converted once, reused while the file is unchanged); the
                           three above open args.model through it, so `colibri generate -m x.gguf`, the
                           server (serve/launch.py Server) and LLM("x.gguf") share one import
    attach(name, ...)   -> a running named pool, with the model and arithmetic checked against the caller's
The sequence runners (pool/runner.py) build their LLMs from the same args.llm_kwargs() (serve/launch.py
open_runners passes them), over the pool's workers.
"""
import dataclasses
import os

from .errors import InvalidArgument, PoolError


def open_llm(args, pool=None):
    """cd.LLM of args. pool: a running Pool to put its experts on instead (the caller keeps it open)."""
    from .model import LLM
    args = _check_model(args)
    owned = pool is None
    if owned:
        pool = open_pool(args)
    try:
        return LLM.from_args(args, moe=pool, owns_moe=owned)
    except BaseException:
        if owned and pool is not None:
            pool.shutdown()
        raise


def open_experts(args):
    """The MoE executor of args: this process's MoeExecutor (its expert store) or the pool (close()/shutdown())."""
    args = _check_model(args)
    pool = open_pool(args)
    if pool is not None:
        return pool
    from .moe_executor import MoeExecutor
    return MoeExecutor(args.model, threads=args.threads, cache_bytes=args.cache_bytes, offload_dir=args.offload_dir,
                  policy=args.policy, compression=args.offload_compression, w8a8=args.w8a8)


def open_pool(args):
    """A Pool of args.workers started here, the running pool args.pool, or None (experts in process)."""
    if args.pool:
        return attach(args.pool, model=args.model, w8a8=args.w8a8, ray_address=args.ray_address)
    if not args.workers:
        return None
    args = _check_model(args)
    from .pool import Pool
    return Pool(args.model, ray_address=args.ray_address, **args.pool_kwargs())


def attach(name, model=None, w8a8=None, ray_address=None):
    """The running pool `name` (`colibri pool start`, Pool(name=...)); model / w8a8, when given, must be what
    it serves. One-line PoolError when none of that name is recorded or Ray cannot be reached."""
    from .pool import Pool, service
    address = service.resolve_address(name, ray_address)
    if address is None:
        raise PoolError(f"no running pool named {name!r} is recorded and no --address/RAY_ADDRESS was given (start one "
                        f"with `colibri pool start CONFIG --pool {name}`; `colibri pool list` shows them)")
    served = (service.read_state(name) or {}).get("model")
    if model and served and os.path.realpath(served) != os.path.realpath(model):
        raise InvalidArgument(f"pool {name!r} serves {served}, but the model asked is {model}", parameter="pool",
                              value=name)
    try:
        pool = Pool.attach(name, ray_address=address)
    except PoolError:
        raise
    except Exception as exc:           # Ray cannot connect: the head is gone
        raise PoolError(f"pool {name!r}: cannot reach Ray at {address} ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})") from None
    if w8a8 is not None and pool.w8a8 != bool(w8a8):
        pool.shutdown()
        raise InvalidArgument(f"pool {name!r} runs w8a8={pool.w8a8} but w8a8={bool(w8a8)} was asked: a token's bits "
                              f"would depend on the pool; ask w8a8={pool.w8a8} or start the pool with pool.w8a8: "
                              f"{str(bool(w8a8)).lower()}", parameter="w8a8", value=w8a8)
    return pool


def _check_model(args):
    if not args.model:
        raise InvalidArgument("model (a .colibri file) is required", parameter="model", value=args.model)
    if not os.path.exists(args.model):
        raise InvalidArgument(f"model: {args.model}: no such file", parameter="model", value=args.model)
    path = container(args.model)
    return args if path == args.model else dataclasses.replace(args, model=path)


def container(model):
    """The .colibri path to open for `model`: `model` itself, or for a GGUF file its cached import."""
    from .format.gguf_cache import container_for
    return container_for(model)
