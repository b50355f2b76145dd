"""Where a decode step's time goes: the C core's calls against everything else (Python and numpy around them).

Role: scale/child.py calls profile(llm, rng, steps) after its timed runs; it decodes one sequence `steps` tokens
twice. The timed pass runs without a profiler: every `cb_*` function of the core is reached through a proxy of
the native modules' `lib` that adds its wall time up (two clock reads per call, ~11 calls a step when the layers
are fused), so python_share = 1 - native time / step wall time, with the proxy's own cost (~1 us a call) counted
as Python: an upper bound. The counted pass runs under cProfile for the Python calls per step only. Both with
the decoder's fused layers (what the model runs) and, for comparison, op by op.
"""
import cProfile
import contextlib
import importlib
import pstats
import time

NATIVE_MODULES = ("_lib", "kv_ops", "layer_ops", "fused_step", "matrix", "model_ops", "runtime", "views", "gating",
                  "checks")


class _TimedLib:
    """Stands in for the cffi `lib`: cb_* functions come back wrapped to add their wall time to `seconds`."""

    def __init__(self, lib):
        self._lib, self.seconds, self._wrapped = lib, {}, {}

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if not name.startswith("cb_") or not callable(fn):
            return fn
        if name not in self._wrapped:
            def timed(*args, _fn=fn, _name=name):
                t0 = time.perf_counter()
                try:
                    return _fn(*args)
                finally:
                    self.seconds[_name] = self.seconds.get(_name, 0.0) + time.perf_counter() - t0
            self._wrapped[name] = timed
        return self._wrapped[name]


@contextlib.contextmanager
def _timed_native():
    mods = [importlib.import_module(f"colibri_dist.native.{m}") for m in NATIVE_MODULES]
    mods = [m for m in mods if hasattr(m, "lib")]
    proxy = _TimedLib(mods[0].lib)
    try:
        for m in mods:
            m.lib = proxy
        yield proxy
    finally:
        for m in mods:
            m.lib = proxy._lib


def _decode(llm, rng, steps, timed=None, prof=None):
    seq = llm.new_sequence()
    try:
        llm.forward([(seq, rng.integers(0, llm.vocab_size, 16).tolist(), False)])
        toks = rng.integers(0, llm.vocab_size, steps)
        t0 = time.perf_counter()
        with timed or contextlib.nullcontext() as native, prof or contextlib.nullcontext():
            for t in toks:
                llm.forward([(seq, [int(t)], False)])
        return time.perf_counter() - t0, native
    finally:
        llm.release(seq)


def _one(llm, rng, steps, fused):
    llm.decoder.fused = fused
    wall, native = _decode(llm, rng, steps, timed=_timed_native())
    prof = cProfile.Profile()
    _decode(llm, rng, steps, prof=prof)
    calls = sum(r[1] for r in pstats.Stats(prof).stats.values())
    return {"ms_per_step": 1e3 * wall / steps, "calls_per_step": calls / steps,
            "python_share": 1.0 - sum(native.seconds.values()) / wall,
            "native_ms_per_step": {k: round(1e3 * v / steps, 3) for k, v in sorted(native.seconds.items())}}


def profile(llm, rng, steps):
    """{"fused": ..., "op_by_op": ...} for one sequence decoding `steps` tokens (fused only when the model fuses)."""
    fused = llm.decoder.fused
    try:
        out = {"fused": _one(llm, rng, steps, True)} if llm.decoder.fusing() else {}
        out["op_by_op"] = _one(llm, rng, steps, False)
        return out
    finally:
        llm.decoder.fused = fused
