"""The files `colibri bench scale` measures: the checkpoint, colibri's container and llama.cpp's GGUF.

Role: folder(work, shape, layers, routing) names one scratch folder per checkpoint; checkpoint() builds it
(checkpoint.py); container() converts it with `colibri convert --preset PRESET` inside a memory limit when
one can be set (convert's peak must not grow with the model: limits.py, the group's peak and failcnt are
reported) and times it; ggufs() converts it with llama.cpp's converter to Q8_0 and requantizes to each type
(llama-quantize --allow-requantize, as ../shared/peers/README.md does at real size), each step timed with
its peak RSS. Each file is
made once (kept until the bench's clean-up) and only complete files count: writers go through .partial names.
"""
import os
import sys
import time

from . import checkpoint as ckpt
from .limits import MemoryLimit, available, run_counted


def folder(work, shape, layers, routing):
    return os.path.join(work, f"{shape}-{layers}L-skew{routing['skew']:g}-loc{routing['locality']:g}")


def checkpoint(d, cfg, routing, seed=0):
    t = time.perf_counter()
    hf = ckpt.build(os.path.join(d, "hf"), cfg, routing, seed=seed, log=lambda m: print(m, flush=True))
    return hf, time.perf_counter() - t


def container(hf, d, preset, limit_bytes):
    """(path, {seconds, peak, ...}) of the checkpoint converted with the preset, in a memory limit if possible."""
    path = os.path.join(d, f"model-{preset}.colibri")
    if os.path.exists(path):
        return path, {"reused": True}
    cmd = [sys.executable, "-m", "colibri_dist", "convert", hf, path, "--preset", preset, "--force"]
    why = available()
    if why or not limit_bytes:
        r = dict(run_counted(cmd), limit=None, limit_note=why)
    else:
        with MemoryLimit(limit_bytes, name=f"colibri-scale-convert-{os.getpid()}") as lim:
            r = lim.run(cmd)
    if r["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {r['rc']}, peak {r.get('peak')} of limit "
                           f"{r.get('limit')}):\n{r['stderr'][-3000:]}")
    return path, {k: v for k, v in r.items() if k not in ("stdout", "stderr")}


def _measured(cmd, env=None):
    """Runs one llama.cpp step -> {seconds, peak_rss}; raises with its stderr on failure."""
    r = run_counted(cmd, env=env)
    if r["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {r['rc']}):\n{r['stderr'][-3000:]}")
    return {"seconds": r["seconds"], "peak_rss": r["peak_rss"]}


def ggufs(t, hf, d, types, threads):
    """{type: path} and {step: {seconds, peak_rss}} of llama.cpp's files: convert_hf_to_gguf to Q8_0, then
    llama-quantize --allow-requantize to each type."""
    from ..model import peer_llama
    work = os.path.join(d, "gguf")
    os.makedirs(work, exist_ok=True)
    steps, q8 = {}, os.path.join(work, "model-Q8_0.gguf")
    if not os.path.exists(q8):
        src = peer_llama.source_with_tokenizer(hf, work)
        env = dict(os.environ, PYTHONPATH=t.gguf_py + os.pathsep + os.environ.get("PYTHONPATH", ""))
        steps["convert_hf_to_gguf q8_0"] = _measured(
            [sys.executable, t.converter, src, "--outtype", "q8_0", "--outfile", q8 + ".partial"], env)
        os.replace(q8 + ".partial", q8)
    out = {}
    for typ in types:
        path = q8 if typ == "Q8_0" else os.path.join(work, f"model-{typ}.gguf")
        if not os.path.exists(path):
            steps[f"llama-quantize {typ}"] = _measured([t.quantize, "--allow-requantize", q8, path + ".partial", typ,
                                                        str(threads)])
            os.replace(path + ".partial", path)
        out[typ] = path
    return out, steps
