"""The timed part of `colibri bench scale`: alternated rounds of colibri and llama.cpp, in RAM and under limits.

Role: rounds(plan) runs, for each round, every engine in RAM (colibri through scale/child.py in a process of
its own; llama.cpp's llama-batched-bench), then for each memory limit every engine cold (the model files'
pages dropped first) inside a memory cgroup of that size: colibri with experts served from the mmap'd file
(the default) and with the expert RAM cache sized to the limit, under plain LRU and under LFU (the
experts routing uses most stay: pinning from routing statistics); llama.cpp with its default repacked copy
and with --no-repack (mmap paging). The order reverses every other round; each round also measures the
read bandwidth and the disk's random read rate at one expert's size. A run that fails or is OOM-killed is
recorded as such (its exit code, peak and the tail of its stderr), never dropped. With plan.pool_workers each
round ends with the pool stage (scale/pool.py: the pool with its workers in memory cgroups beside the engine
in process).
"""
import json
import os
import sys

from . import disk
from .limits import MemoryLimit, drop_cache, run_counted
from ..model import peer_llama


def _colibri_cmd(plan, cache_bytes, prompt, gen, parallel, kv_bytes, precheck=True, policy="lru"):
    cmd = [sys.executable, "-m", "colibri_dist.bench.scale.child", "--path", plan.container,
           "--threads", str(plan.threads), "--prompt", str(prompt), "--decode-prompt", str(plan.decode_prompt),
           "--gen", str(gen), "--parallel", ",".join(map(str, parallel)), "--kv-bytes", str(kv_bytes)]
    if cache_bytes is not None:
        cmd += ["--cache-bytes", str(int(cache_bytes)), "--policy", policy]
    return cmd + ([] if precheck else ["--no-precheck"])


def _colibri_result(r):
    out = {k: v for k, v in r.items() if k not in ("stdout", "stderr")}
    if r["rc"] == 0:
        out["result"] = json.loads(r["stdout"])
    else:
        out["error"] = r["stderr"][-2000:]
    return out


def _llama_result(r):
    out = {k: v for k, v in r.items() if k not in ("stdout", "stderr")}
    try:
        out["result"] = peer_llama.parse_batched(r["stdout"]) if r["rc"] == 0 else None
    except RuntimeError as exc:
        out["result"] = None
        out["error"] = str(exc)[-2000:]
    if r["rc"] != 0:
        out["error"] = r["stderr"][-2000:]
    return out


def in_ram(plan, name):
    """One engine in RAM: colibri (prefill + decode of each parallel count) or llama.cpp (two batched runs)."""
    spec = plan.ram_engines[name]
    if spec["kind"] == "colibri":
        kv = plan.kv_bytes(max(plan.parallel) * (plan.decode_prompt + plan.gen) + plan.prompt)
        cmd = _colibri_cmd(plan, None, plan.prompt, plan.gen, plan.parallel, kv)
        return _colibri_result(run_counted(cmd + ["--profile-steps", str(plan.profile_steps)], timeout=plan.timeout))
    typ = spec["type"]
    pre = run_counted(peer_llama.batched_cmd(plan.tools, plan.ggufs[typ], plan.threads, plan.prompt, plan.gen, [1]),
                      timeout=plan.timeout)
    dec = run_counted(peer_llama.batched_cmd(plan.tools, plan.ggufs[typ], plan.threads, plan.decode_prompt,
                                             plan.gen, plan.parallel), timeout=plan.timeout)
    return {"prefill": _llama_result(pre), "decode": _llama_result(dec)}


def limited(plan, name, limit):
    """One engine, cold, inside a memory cgroup of `limit` bytes: 1 sequence, a short prompt, plan.limit_gen tokens."""
    for path in [plan.container, *plan.ggufs.values()]:
        drop_cache(path)
    spec = plan.limit_engines[name]
    if spec["kind"] == "colibri":
        cache = plan.cache_bytes(limit) if spec["cache"] else None
        cmd = _colibri_cmd(plan, cache, plan.decode_prompt, plan.limit_gen, [1], plan.kv_bytes(2 * plan.prompt),
                           precheck=False, policy=spec.get("policy", "lru"))
        parse = _colibri_result
    else:
        cmd = peer_llama.batched_cmd(plan.tools, plan.ggufs[spec["type"]], plan.threads, plan.decode_prompt,
                                     plan.limit_gen, [1], spec["extra"])
        parse = _llama_result
    with MemoryLimit(limit) as lim:
        return parse(lim.run(cmd, timeout=plan.timeout))


def _order(names, r):
    return list(names) if r % 2 == 0 else list(reversed(names))


def one_round(plan, r, log):
    from ..kernels.run import read_bandwidth
    bw, _ = read_bandwidth(plan.bw_mib, plan.threads)
    rec = {"round": r, "load_before": os.getloadavg()[0], "read_bandwidth": bw,
           "disk": disk.read_rate(plan.container, plan.expert_bytes, threads=plan.threads),
           "in_ram": {}, "limits": {}}
    for name in _order(plan.ram_engines, r):
        rec["in_ram"][name] = in_ram(plan, name)
        log(f"round {r} in RAM {name}: done in {_seconds(rec['in_ram'][name]):.0f} s")
    for frac in plan.limits:
        limit = plan.limit_bytes(frac)
        got = rec["limits"][f"{frac:g}"] = {"limit_bytes": limit, "engines": {}}
        for name in _order(plan.limit_engines, r):
            got["engines"][name] = limited(plan, name, limit)
            log(f"round {r} limit {frac:g} {name}: exit {got['engines'][name]['rc']} in "
                f"{got['engines'][name]['seconds']:.0f} s")
    if plan.pool_workers:
        from . import pool
        rec["pool"] = pool.stage(plan, r, log)
    return rec


def _seconds(res):
    return res["seconds"] if "seconds" in res else sum(v["seconds"] for v in res.values())


def rounds(plan, log=print):
    return [one_round(plan, r, log) for r in range(plan.rounds)]
