"""`python -m colibri_dist.bench calls [--model PATH] [--seqs 1 8] [--steps 20] [--tok-s] [--top N] [--json PATH]`.

Role in the data flow: counts the Python calls of one decode step on the serve path (issue 30's "Python calls
per decode step", target <= 200 at 4 layers): an LLMEngine over cd.LLM steps --seqs sampling requests
(token-id prompts, streaming text through the tokenizer, cumulative outputs) under cProfile; every function the
profiler sees counts, Python or C (primitive and recursive calls), divided by the steps. Without --model it
builds the 4-layer, 8-expert demo MoE (demos/llm.py) once in a temporary directory. The count is
deterministic for a given model, numpy and Python (no timing in it). --tok-s also times decode tokens per
second without the profiler (the best of --repeats runs of --steps steps); --top N prints the N functions that
make the most calls per step.
"""
import argparse
import cProfile
import json
import os
import pstats
import tempfile
import time

from ...generate import SamplingParams

LAYERS, EXPERTS = 4, 8


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench calls")
    ap.add_argument("--model", default=None, help=".colibri model (default: the 4-layer demo MoE, built once)")
    ap.add_argument("--seqs", type=int, nargs="+", default=[1, 8], help="concurrent sequences (default 1 8)")
    ap.add_argument("--steps", type=int, default=20, help="decode steps counted (default 20)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tok-s", action="store_true", help="also time decode tokens/s (no profiler)")
    ap.add_argument("--repeats", type=int, default=3, help="--tok-s: timed runs, the best kept (default 3)")
    ap.add_argument("--top", type=int, default=0, help="print the N functions making the most calls per step")
    ap.add_argument("--json", default=None, help="write results here")
    return ap.parse_args(argv)


def demo_model(root):
    """Path of the demo MoE container under root (written and converted when missing)."""
    import colibri_dist as cd
    from ...demos import llm as demo_llm
    path = os.path.join(root, f"demo-{LAYERS}l-{EXPERTS}e.colibri")
    if not os.path.exists(path):
        hf = os.path.join(root, "hf")
        demo_llm.write_checkpoint(hf, layers=LAYERS, n_experts=EXPERTS)
        cd.convert(hf, path, progress=False)
    return path


def _engine(llm, n_seqs, steps):
    """A fresh engine with n_seqs requests past their prefill (and a few warm decode steps)."""
    eng = llm.new_engine()
    for i in range(n_seqs):
        eng.add_request(f"r{i}", [5 + i, 6, 7, 8],
                        SamplingParams(max_tokens=steps + 10, temperature=0.8, seed=i, ignore_eos=True))
    for _ in range(5):
        eng.step()
    return eng


def count_calls(llm, n_seqs, steps=20):
    """-> (calls per decode step, pstats.Stats of the steps) of n_seqs sequences."""
    eng = _engine(llm, n_seqs, steps)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        eng.step()
    prof.disable()
    _drain(eng, n_seqs)
    st = pstats.Stats(prof)
    return sum(v[1] for v in st.stats.values()) / steps, st


def decode_tok_s(llm, n_seqs, steps=20, repeats=3):
    """Decode tokens per second of n_seqs sequences over steps steps: the best of repeats runs."""
    best = 0.0
    for _ in range(repeats):
        eng = _engine(llm, n_seqs, steps)
        t = time.perf_counter()
        for _ in range(steps):
            eng.step()
        best = max(best, n_seqs * steps / (time.perf_counter() - t))
        _drain(eng, n_seqs)
    return best


def _drain(eng, n_seqs):
    eng.abort_request([f"r{i}" for i in range(n_seqs)])
    while eng.has_unfinished():
        eng.step()


def top_sites(st, steps, n):
    """[(calls per step, 'file:line name')] of the n functions that make the most calls (their callees')."""
    made = {}
    for _, (_, _, _, _, callers) in st.stats.items():
        for caller, c in callers.items():
            made[caller] = made.get(caller, 0) + (c[1] if isinstance(c, tuple) else c)
    rows = sorted(((c / steps, k) for k, c in made.items()), reverse=True)[:n]
    return [(c, f"{os.path.basename(f)}:{line} {name}") for c, (f, line, name) in rows]


def main(argv=None):
    import colibri_dist as cd
    a = _args(argv)
    with tempfile.TemporaryDirectory(prefix="colibri-calls-") as tmp:
        path = a.model or demo_model(tmp)
        with cd.LLM(path, threads=a.threads) as llm:
            results = []
            for n in a.seqs:
                calls, st = count_calls(llm, n, a.steps)
                row = {"seqs": n, "calls_per_step": round(calls, 1)}
                if a.tok_s:
                    row["decode_tok_s"] = round(decode_tok_s(llm, n, a.steps, a.repeats), 1)
                results.append(row)
                print(f"seqs {n}: {calls:.0f} Python calls per decode step"
                      + (f", {row['decode_tok_s']} decode tok/s" if a.tok_s else ""))
                for c, site in top_sites(st, a.steps, a.top):
                    print(f"  {c:7.1f}  {site}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model or f"demo {LAYERS} layers {EXPERTS} experts", "steps": a.steps,
                       "threads": a.threads, "results": results}, f, indent=1)
    return 0
