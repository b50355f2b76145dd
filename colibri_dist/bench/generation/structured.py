"""`python -m colibri_dist.bench structured [--quick] [--rounds 2] [--rows 1000] [--json PATH]`.

Role: measures what structured outputs cost (docs/PERFORMANCE.md, "Structured outputs"). On the whole-model
benchmark's OLMoE-shaped checkpoint (bench/model/run.py, int8, vocab 50,304) given GPT-2's tokenizer
(50,257 tokens, rebuilt from llama.cpp's models/ggml-vocab-gpt-2.gguf): 32 sequences decode 128 tokens
each, unconstrained and under a JSON schema (an extraction array too long to finish), alternated for
--rounds; the mean decode step time of each, their ratio, and the mask fill time per token and the part
of it the step waited for (the fill runs beside the model call). Compile time per schema, cold and cached,
for the bench schema and 200 random schemas, on that tokenizer and on Qwen2's (151,646 tokens, the Qwen3
family's; masks per token there too). Then a --rows-row extraction job (`colibri run`, in-process) on the
random-weight test model (testing/random_llm.py): rows that parse and validate, with the schema (compact
JSON, and vLLM's default free whitespace, which a random model may fill until max_tokens) and without it
(today's baseline). Prints ratios, writes JSON. No thresholds.
"""
import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

VOCABS = "/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/models"
ITEM = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                         "qty": {"type": "integer", "minimum": 0, "maximum": 1000},
                                         "ok": {"type": "boolean"}},
        "required": ["name", "qty", "ok"], "additionalProperties": False}
BENCH_SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "minItems": 64, "items": ITEM}},
                "required": ["items"], "additionalProperties": False}
JOB_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "qty": {"type": "integer", "minimum": 0, "maximum": 99},
                                               "tags": {"type": "array", "maxItems": 3, "items": {"enum": ["a", "b"]}}},
              "required": ["name", "qty", "tags"], "additionalProperties": False}


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench structured", description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "colibri"))
    ap.add_argument("--vocabs", default=os.environ.get("COLIBRI_LLAMA_CPP_MODELS", VOCABS),
                    help="llama.cpp's models/ folder (ggml-vocab-gpt-2.gguf, ggml-vocab-qwen2.gguf)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seqs", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="the small shape (a smoke run, not a measurement)")
    ap.add_argument("--json", default=None)
    return ap.parse_args(argv)


def tokenizer_files(vocabs, name):
    from ...format.gguf_tokenizer import VocabFile, tokenizer_files as files
    return files(VocabFile(os.path.join(vocabs, f"ggml-vocab-{name}.gguf")))


def bench_model(args):
    """The whole-model benchmark's checkpoint with GPT-2's tokenizer files beside it, converted int8 once."""
    from ..model.run import FULL, QUICK, checkpoint
    src, _ = checkpoint(QUICK if args.quick else FULL, args.cache)
    d = os.path.join(os.path.dirname(src), "hf-gpt2-tokenizer")
    dst = os.path.join(os.path.dirname(src), "model-int8-gpt2-tokenizer.colibri")
    if not os.path.exists(dst):
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(src):
            if not os.path.exists(os.path.join(d, name)):
                os.symlink(os.path.join(src, name), os.path.join(d, name))
        for name, text in tokenizer_files(args.vocabs, "gpt-2").items():
            with open(os.path.join(d, name), "w", encoding="utf-8") as fh:
                fh.write(text)
        from ...format.convert import convert
        convert(d, dst, experts="int8", dense="int8", progress=False, force=True)
    return dst


def decode_round(llm, args, constrained, rng_seed=0):
    """Mean seconds of the decode steps with every sequence decoding; the grammar timing of the round."""
    import colibri_dist as cd
    rng = np.random.default_rng(rng_seed)
    prompts = [rng.integers(0, 50000, 16).tolist() for _ in range(args.seqs)]
    so = {"json": BENCH_SCHEMA} if constrained else None
    params = [cd.SamplingParams(max_tokens=args.tokens, temperature=1.0, seed=i, ignore_eos=True,
                                structured_outputs=so) for i in range(args.seqs)]
    steps = []
    grammars = llm.llm_engine._grammars
    before = dict(grammars.timing) if grammars is not None else None
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False,
                        on_step=lambda s: steps.append(s) if s.decode_tokens == args.seqs and not s.prefill_tokens else None)
    timing = None
    if constrained:
        g = llm.llm_engine._grammars
        timing = {k: v - (before or {}).get(k, 0) for k, v in g.timing.items()}
    lengths = [len(o.outputs[0].token_ids) for o in outs]
    return {"step_s": float(np.mean([s.t_end - s.t_start for s in steps])), "steps": len(steps),
            "tokens": int(sum(lengths)), "timing": timing}


def compile_times(tok_json, vocab_size, eos, schemas):
    """Cold and cached compile seconds (plus the first mask, where llguidance builds its lexer lazily)."""
    from ...generate.grammar import Grammars
    from ...generate.structured_params import StructuredOutputsParams
    g = Grammars(tok_json, vocab_size, eos)
    t0 = time.perf_counter()
    g.llg_tokenizer()
    out = {"tokenizer_s": time.perf_counter() - t0, "cold_s": [], "cached_s": [], "first_mask_s": []}
    for s in schemas:
        so = StructuredOutputsParams(json=s)
        t0 = time.perf_counter()
        fut = g.submit(so)
        slot = g.slot(fut)
        slot.start()
        t1 = time.perf_counter()
        slot.mask()
        t2 = time.perf_counter()
        g.compile(so)
        out["cold_s"].append(t1 - t0)
        out["first_mask_s"].append(t2 - t1)
        out["cached_s"].append(time.perf_counter() - t2)
    return {k: (v if not isinstance(v, list) else {"mean": float(np.mean(v)), "max": float(np.max(v))})
            for k, v in out.items()}, g


def mask_cost(g, schema, n=32, steps=64, seed=0):
    """Seconds per token of the batched fill of n matchers walking random allowed tokens, and of applying
    one mask to a float32 row (the Processors' part)."""
    from ...generate.grammar import apply_mask
    from ...generate.structured_params import StructuredOutputsParams
    rng = np.random.default_rng(seed)
    slots = []
    for _ in range(n):
        s = g.slot(g.submit(StructuredOutputsParams(json=schema)))
        s.start()
        slots.append(s)
    fill = apply = 0.0
    row = np.zeros(g.words * 32, np.float32)
    for _ in range(steps):
        t0 = time.perf_counter()
        g.start_fill(slots).join()
        fill += time.perf_counter() - t0
        for s in slots:
            x = row.copy()
            t1 = time.perf_counter()
            apply_mask(x, s.bits)
            apply += time.perf_counter() - t1
            allowed = np.flatnonzero(np.isfinite(x))
            s.accept(int(rng.choice(allowed)))
    return {"fill_per_token_us": fill / (n * steps) * 1e6, "fill_per_step_ms": fill / steps * 1e3,
            "apply_per_token_us": apply / (n * steps) * 1e6}


def extraction_job(rows, root):
    """--rows rows through the job runner (`colibri run`'s, in-process) with the schema and without it: rows
    that validate."""
    import jsonschema

    from ...config import load_config
    from ...jobs.pipeline import run_job
    from ...testing import random_llm
    model = random_llm.build(os.path.join(root, "m.colibri"))
    with open(os.path.join(root, "in.jsonl"), "w") as fh:
        for i in range(rows):
            fh.write(json.dumps({"id": i, "prompt": f"Extract the item of order {i} as JSON."}) + "\n")
    out = {}
    variants = (("schema_compact", {"json": JOB_SCHEMA, "disable_any_whitespace": True}),
                ("schema_free_whitespace", {"json": JOB_SCHEMA}), ("without", None))
    for name, so in variants:
        sp = {"max_tokens": 120, "temperature": 1.0, **({"structured_outputs": so} if so else {})}
        cfg = os.path.join(root, f"{name}.yaml")
        with open(cfg, "w") as fh:
            json.dump({"job": {"kind": "generate", "input": os.path.join(root, "in.jsonl"), "executor": "engine",
                               "sampling_params": sp}, "model": model, "pool": {"workers": 0},
                       "report": {"html": False, "progress": "none"}}, fh)
        t0 = time.perf_counter()
        run_job(load_config(cfg), out_dir=os.path.join(root, name), restart=True)
        seconds = time.perf_counter() - t0
        ok = 0
        with open(os.path.join(root, name, "in.jsonl")) as fh:
            for line in fh:
                try:
                    jsonschema.validate(json.loads(json.loads(line)["generated_text"]), JOB_SCHEMA)
                    ok += 1
                except (ValueError, KeyError, jsonschema.ValidationError):
                    pass
        out[name] = {"rows": rows, "valid_rows": ok, "valid_fraction": ok / rows, "seconds": seconds}
    return out


def main(argv=None):
    args = _args(sys.argv[1:] if argv is None else argv)
    import colibri_dist as cd
    from ...testing.schemas import schemas
    from ..kernels.run import machine
    report = {"machine": machine(), "threads": args.threads, "seqs": args.seqs, "tokens": args.tokens}
    path = bench_model(args)
    with cd.LLM(path, threads=args.threads, kv_cache_bytes=1 << 30) as llm:
        decode_round(llm, args, False)                              # warm-up: maps, arena, first compile
        decode_round(llm, args, True)
        rounds = {"unconstrained": [], "json_schema": []}
        for r in range(args.rounds):                                # alternated
            rounds["unconstrained"].append(decode_round(llm, args, False, r))
            rounds["json_schema"].append(decode_round(llm, args, True, r))
    u = float(np.mean([x["step_s"] for x in rounds["unconstrained"]]))
    c = float(np.mean([x["step_s"] for x in rounds["json_schema"]]))
    t = rounds["json_schema"]
    masks = sum(x["timing"]["masks"] for x in t)
    report["decode"] = {"rounds": rounds, "unconstrained_step_ms": u * 1e3, "json_schema_step_ms": c * 1e3,
                        "overhead": c / u - 1.0,
                        "fill_per_token_us": sum(x["timing"]["fill_s"] for x in t) / masks * 1e6,
                        "waited_per_token_us": sum(x["timing"]["wait_s"] for x in t) / masks * 1e6}
    report["compile"] = {}
    for name in ("gpt-2", "qwen2"):
        files = tokenizer_files(args.vocabs, name)
        from tokenizers import Tokenizer
        n = Tokenizer.from_str(files["tokenizer.json"]).get_vocab_size()
        eos = json.loads(files["generation_config.json"]).get("eos_token_id")
        eos = eos if isinstance(eos, list) else [eos]
        times, g = compile_times(files["tokenizer.json"], n, eos, [BENCH_SCHEMA, JOB_SCHEMA] + schemas(200))
        report["compile"][name] = {"vocab": n, **times, "masks": mask_cost(g, BENCH_SCHEMA, n=args.seqs)}
    report["job"] = extraction_job(args.rows, os.path.join(args.cache, "bench-structured-job"))
    _print(report)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    shutil.rmtree(os.path.join(args.cache, "bench-structured-job"), ignore_errors=True)
    return 0


def _print(r):
    d = r["decode"]
    print(f"decode, {r['seqs']} sequences x {r['tokens']} tokens, {r['threads']} threads:")
    print(f"  step unconstrained {d['unconstrained_step_ms']:.1f} ms, JSON schema {d['json_schema_step_ms']:.1f} ms: "
          f"overhead {d['overhead'] * 100:+.1f}%")
    print(f"  mask fill {d['fill_per_token_us']:.1f} us/token (beside the model call), "
          f"waited {d['waited_per_token_us']:.1f} us/token")
    for name, c in r["compile"].items():
        m = c["masks"]
        print(f"  {name} tokenizer ({c['vocab']:,} tokens): built in {c['tokenizer_s'] * 1e3:.0f} ms; compile cold "
              f"{c['cold_s']['mean'] * 1e3:.2f} ms mean / {c['cold_s']['max'] * 1e3:.1f} max, first mask "
              f"{c['first_mask_s']['mean'] * 1e3:.2f} ms mean, cached {c['cached_s']['mean'] * 1e6:.1f} us; "
              f"fill {m['fill_per_token_us']:.1f} us/token, apply {m['apply_per_token_us']:.1f} us/token")
    for name, j in r["job"].items():
        print(f"  extraction job {name}: {j['valid_rows']}/{j['rows']} rows parse and validate "
              f"({j['valid_fraction'] * 100:.1f}%), {j['seconds']:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
