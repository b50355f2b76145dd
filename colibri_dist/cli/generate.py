"""`colibri generate MODEL "prompt"` (streams tokens as they come) and `colibri score MODEL FILE`.

Role in the data flow: argv -> sampling params (only the flags given, over the model's
generation_config.json defaults and then SamplingParams' vLLM defaults: the same defaults as
LLM.generate) -> an LLM for MODEL (the whole-model engine, `colibri_dist.model.LLM`) ->
llm.generate/chat (which drive the LLM's one LLMEngine) with an on_token callback that writes each
StreamEvent's text to stdout at once (like `llama-cli -p`); a one-line summary (tokens, finish
reason, time to first token, tokens/s, load time) goes to stderr. `score` prints one JSON object.
"""
import json
import math
import sys
import time


def register(subparsers):
    p = subparsers.add_parser("generate", help="generate text from a prompt, streaming tokens",
                              description="Generate a completion of PROMPT with MODEL, printing tokens as they "
                                          "come. Sampling flags follow vLLM's SamplingParams.")
    p.add_argument("model", metavar="MODEL", help=".colibri model")
    p.add_argument("prompt", metavar="PROMPT", help="prompt text (with --chat: the user message); '-' = stdin")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="tokens to generate at most (default: the model's max_new_tokens, else 16 as vLLM)")
    p.add_argument("--min-tokens", type=int, default=None, metavar="N", help="no eos / stop before N tokens")
    p.add_argument("--temperature", type=float, default=None, metavar="T",
                   help="0 = greedy (default: the model's generation_config, else 1.0 as vLLM)")
    p.add_argument("--top-p", type=float, default=None, metavar="P")
    p.add_argument("--top-k", type=int, default=None, metavar="K", help="0 = off")
    p.add_argument("--min-p", type=float, default=None, metavar="P")
    p.add_argument("--repetition-penalty", type=float, default=None, metavar="R", help="1 = off")
    p.add_argument("--presence-penalty", type=float, default=None, metavar="P")
    p.add_argument("--frequency-penalty", type=float, default=None, metavar="F")
    p.add_argument("--seed", type=int, default=None, metavar="S")
    p.add_argument("--stop", action="append", default=None, metavar="TEXT", help="stop string (repeatable)")
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--chat", action="store_true", help="wrap PROMPT as a user turn in the model's chat template")
    p.add_argument("--system", default=None, metavar="TEXT", help="with --chat: a system message first")
    _engine_flags(p)
    p.set_defaults(func=main_generate)
    s = subparsers.add_parser("score", help="log-probabilities of a text under a model",
                              description="Score FILE's text with MODEL: the log-probability of every token "
                                          "after the first; prints a JSON object.")
    s.add_argument("model", metavar="MODEL", help=".colibri model")
    s.add_argument("file", metavar="FILE", help="UTF-8 text file ('-' = stdin)")
    s.add_argument("--tokens", action="store_true", help="include the per-token log-probabilities")
    _engine_flags(s)
    s.set_defaults(func=main_score)


ENGINE_FLAGS = ("workers", "pool", "threads", "w8a8", "kv_cache_bytes", "max_seq_len", "cache_bytes", "offload_dir",
                "offload_compression", "policy")


def _engine_flags(p):
    from .engine_flags import add_engine_flags
    add_engine_flags(p, ENGINE_FLAGS)


def open_llm(args):
    """-> the LLM for MODEL with its experts where the engine flags say (front.open_llm; close() shuts a pool
    started for it). Tests replace this function."""
    from ..front import open_llm as front_open
    from .common import warn_workers
    from .engine_flags import engine_args_of
    engine = engine_args_of(args, ENGINE_FLAGS, model=args.model)
    warn_workers(engine.workers or None)
    return front_open(engine)


def _close(llm):
    if hasattr(llm, "close"):
        llm.close()


SAMPLING_FLAGS = ("max_tokens", "min_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                  "presence_penalty", "frequency_penalty", "seed", "stop")


def sampling_dict(args):
    """The sampling fields the flags set (checked now, so a bad value fails before the model loads)."""
    from ..generate import SamplingParams
    params = {k: getattr(args, k) for k in SAMPLING_FLAGS if getattr(args, k) is not None}
    if args.ignore_eos:
        params["ignore_eos"] = True
    SamplingParams.from_dict(params, {"min_tokens": 0, "max_tokens": None})
    return params


def main_generate(args, out=None, err=None):
    out, err = out or sys.stdout, err or sys.stderr
    params = sampling_dict(args)
    _check_text_args(args)
    t0 = time.perf_counter()
    llm = open_llm(args)
    try:
        return _stream(args, params, llm, out, err, time.perf_counter() - t0)
    except BrokenPipeError:          # the reader went away (`| head`): stop quietly, like other CLI tools
        _silence(out)
        return 0
    finally:
        _close(llm)


def _check_text_args(args):
    """PROMPT ('-': stdin) and --system must be UTF-8: bytes that are not arrive from argv as U+DC80..U+DCFF
    (surrogateescape), which no tokenizer takes; one usage error naming the argument and the byte."""
    from ..errors import InvalidArgument
    from ..generate.safe_text import check_text
    what = "PROMPT"
    if args.prompt == "-":
        what = "PROMPT (stdin)"
        try:
            args.prompt = sys.stdin.read()
        except UnicodeDecodeError as exc:
            raise InvalidArgument(f"{what}: byte 0x{exc.object[exc.start]:02X} at offset {exc.start} is not "
                                  f"UTF-8 (pass UTF-8 text)") from None
    check_text(args.prompt, what, from_bytes=True)
    if args.system is not None:
        check_text(args.system, "--system", from_bytes=True)


def _silence(out):
    """Point the broken stdout at /dev/null so the interpreter's final flush does not complain."""
    try:
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _stream(args, params, llm, out, err, t_load):
    first = []

    def on_token(event):
        if not first:
            first.append(time.perf_counter())
        if event.text:
            out.write(event.text)
            out.flush()
    t1 = time.perf_counter()
    if args.chat:
        conv = ([{"role": "system", "content": args.system}] if args.system else []) + \
               [{"role": "user", "content": args.prompt}]
        c = llm.chat([conv], params, use_tqdm=False, on_token=on_token)[0]
    else:
        c = llm.generate([args.prompt], params, use_tqdm=False, on_token=on_token)[0]
    t_end = time.perf_counter()
    if c.error is not None:
        raise c.error
    out.write("\n")
    out.flush()
    ttft = (first[0] - t1) if first else float("nan")
    decode_s = t_end - first[0] if first else 0.0
    rate = (len(c.token_ids) - 1) / decode_s if decode_s > 0 and len(c.token_ids) > 1 else float("nan")
    print(f"colibri: {len(c.prompt_token_ids)} prompt tokens, {len(c.token_ids)} generated "
          f"(finish: {c.finish_reason}); first token {ttft * 1e3:.0f} ms, {rate:.1f} tok/s; "
          f"model load {t_load:.2f} s", file=err, flush=True)
    return 0


def main_score(args, out=None):
    from ..errors import InvalidArgument
    out = out or sys.stdout
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"{args.file}: cannot read UTF-8 text: {exc}") from None
    llm = open_llm(args)
    try:
        s = llm.score([text])[0]
    finally:
        _close(llm)
    if s.error is not None:
        raise s.error
    n = len(s.token_logprobs)
    res = {"num_tokens": s.num_tokens, "total_logprob": s.total_logprob,
           "mean_logprob": s.total_logprob / n if n else None,
           "perplexity": math.exp(-s.total_logprob / n) if n else None}
    if args.tokens:
        res["token_logprobs"] = s.token_logprobs
    print(json.dumps(res), file=out)
    return 0
