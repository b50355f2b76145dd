"""vLLM's GPU-shaped LLM(...) keywords, taken with their meaning on a CPU engine or refused saying why.

Role in the data flow: LLM.__init__ hands them here before anything is opened, so code written for
vLLM's `LLM(model, dtype=..., tensor_parallel_size=1, gpu_memory_utilization=..., trust_remote_code=...,
seed=..., enforce_eager=...)` runs unchanged:
    dtype                   "auto" / "float32": what colibri does (float32 activations over the weights'
                            encodings, chosen at convert). "bfloat16" / "float16" / "half": accepted with a
                            warning that nothing changes (convert with bf16/f16 encodings to store them so).
    tensor_parallel_size    1 only: colibri does not split layers across devices; its experts scale out on
                            Ray workers (EngineArgs(workers=N) through front.open_llm, or LLM(moe=Pool(...))).
    gpu_memory_utilization  a fraction in (0, 1], accepted and ignored: no GPU; the KV cache is sized by
                            kv_cache_bytes (default: max_num_seqs x max_seq_len, capped at 25% of MemAvailable).
    trust_remote_code       accepted, no effect: colibri runs no model code (families are built in).
    enforce_eager           accepted, no effect: there are no CUDA graphs; every step runs eagerly.
    seed                    the scheduler's base seed (requests without their own derive theirs from it and
                            their id); None is 0, so runs stay reproducible.
Every other value raises InvalidArgument naming the keyword. LLM.generate/chat's lora_request (None only:
no adapters) and chat's chat_template_content_format ("auto" / "string": contents reach the template as
given) are checked here too (check_request_options).
"""
import warnings

from ..errors import InvalidArgument

FLOAT32 = ("auto", "float32", "float")
ACCEPTED_LOW = ("bfloat16", "float16", "half")


def check_vllm_options(dtype="auto", tensor_parallel_size=1, gpu_memory_utilization=None, trust_remote_code=False,
                       enforce_eager=False, seed=0):
    """-> the base seed; raises InvalidArgument for a keyword colibri cannot honour."""
    _check_dtype(dtype)
    if isinstance(tensor_parallel_size, bool) or not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
        raise InvalidArgument(f"tensor_parallel_size must be a positive integer, got {tensor_parallel_size!r}",
                              parameter="tensor_parallel_size", value=tensor_parallel_size)
    if tensor_parallel_size > 1:
        raise InvalidArgument(f"tensor_parallel_size={tensor_parallel_size}: colibri does not split layers across "
                              f"devices; run the experts on Ray workers instead: workers= (EngineArgs(model, "
                              f"workers={tensor_parallel_size}) with colibri_dist.front.open_llm, `--workers` on the "
                              f"command line) or a pool (LLM(model, moe=Pool(...)))",
                              parameter="tensor_parallel_size", value=tensor_parallel_size)
    g = gpu_memory_utilization
    if g is not None and (isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 < g <= 1):
        raise InvalidArgument(f"gpu_memory_utilization must be a fraction in (0, 1], got {g!r} (it is ignored on a "
                              f"CPU: size the KV cache with kv_cache_bytes)", parameter="gpu_memory_utilization",
                              value=g)
    for name, v in (("trust_remote_code", trust_remote_code), ("enforce_eager", enforce_eager)):
        if not isinstance(v, bool):
            raise InvalidArgument(f"{name} must be True or False, got {v!r}", parameter=name, value=v)
    if seed is None:
        return 0
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidArgument(f"seed must be an integer >= 0 (the base seed of requests without one), got {seed!r}",
                              parameter="seed", value=seed)
    return seed


def check_request_options(lora_request=None, chat_template_content_format="auto"):
    if lora_request is not None:
        raise InvalidArgument("lora_request: colibri serves no LoRA adapters (merge one into the checkpoint "
                              "before `colibri convert`)", parameter="lora_request", value=lora_request)
    if chat_template_content_format not in ("auto", "string"):
        raise InvalidArgument(f"chat_template_content_format must be 'auto' or 'string' (message contents reach the "
                              f"template as given), got {chat_template_content_format!r}",
                              parameter="chat_template_content_format", value=chat_template_content_format)


def _check_dtype(dtype):
    name = str(dtype).lower().removeprefix("torch.")
    if name in FLOAT32:
        return
    if name in ACCEPTED_LOW:
        warnings.warn(f"LLM(dtype={dtype!r}): colibri computes activations in float32 on the CPU and keeps the "
                      f"weights in the encodings the container was converted with; this dtype changes nothing "
                      f"(convert with bf16/f16 encodings, e.g. `colibri convert --dense bf16`, to store them so)",
                      stacklevel=4)
        return
    raise InvalidArgument(f"dtype must be one of {FLOAT32 + ACCEPTED_LOW}, got {dtype!r} (colibri computes in "
                          f"float32; weight encodings are chosen at convert)", parameter="dtype", value=dtype)
