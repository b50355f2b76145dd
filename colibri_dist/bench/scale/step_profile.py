"""Where a decode step's time goes: the C core's calls against everything else (Python and numpy around them).

Role: scale/child.py calls profile(llm, rng, steps) after its timed runs; it decodes one sequence `steps`
tokens under cProfile and splits the profiled time into the native core's calls (the cffi functions
`cb_*` of colibri_dist._native) and the rest. cProfile's own cost lands in the rest, so the Python share it
reports is an upper bound. Also the calls per step and the per-function native time (which op is how much
of a step), and, for comparison, the same with the decoder's fused layers off (op by op).
"""
import cProfile
import pstats
import time

NATIVE = "colibri_dist._native.cb_"


def _native(stats):
    """{cb function: seconds} of the profiled C core calls."""
    out = {}
    for (_, _, name), row in stats.stats.items():
        at = name.find(NATIVE)
        if at >= 0:
            fn = name[at + len("colibri_dist._native."):].rstrip(">}")
            out[fn] = out.get(fn, 0.0) + row[2]
    return out


def _one(llm, rng, steps, fused):
    llm.decoder.fused = fused
    seq = llm.new_sequence()
    try:
        llm.forward([(seq, rng.integers(0, llm.vocab_size, 16).tolist(), False)])
        toks, prof = rng.integers(0, llm.vocab_size, steps), cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for t in toks:
            llm.forward([(seq, [int(t)], False)])
        prof.disable()
        wall = time.perf_counter() - t0
    finally:
        llm.release(seq)
    st = pstats.Stats(prof)
    native = _native(st)
    total = st.total_tt
    return {"ms_per_step": 1e3 * wall / steps, "calls_per_step": sum(r[1] for r in st.stats.values()) / steps,
            "python_share": 1.0 - sum(native.values()) / total if total else None,
            "native_ms_per_step": {k: round(1e3 * v / steps, 3) for k, v in sorted(native.items())}}


def profile(llm, rng, steps):
    """{"fused": ..., "op_by_op": ...} for one sequence decoding `steps` tokens (fused: what the model runs)."""
    fused = llm.decoder.fused
    try:
        out = {"fused": _one(llm, rng, steps, True)} if llm.decoder.fusing() else {}
        out["op_by_op"] = _one(llm, rng, steps, False)
        return out
    finally:
        llm.decoder.fused = fused
