"""The numbers of `colibri bench scale`: medians over rounds, ratios to llama.cpp and to the machine's bounds.

Role: summarize(report, plan) turns the rounds (scale/measure.py) into
  in_ram   per engine: prefill and decode tok/s (medians), decode-1 bytes per token x tok/s / read bandwidth,
           and colibri / best llama.cpp per column;
  limits   per limit and engine: decode-1 tok/s, exit status (ok, OOM-killed, failed), peak of the group,
           storage bytes read per decode token, two hit rates of the expert cache: the store's (a get that
           waited for no load: prefetched experts count as hits) and the resident one (the experts a token
           needed that were in RAM before anything was loaded for that token: 1 - loads used / gets), and
           for colibri the bound min(in-RAM tok/s, disk rate / bytes a token must read), where a token must
           read (1 - resident hit rate) x the top-k experts' bytes of every layer: tok/s over the bound, read
           bytes over that minimum (what prefetches that went unused and any other read add); colibri / best
           llama.cpp and colibri / its own in-RAM speed.
  pool     the pool stage's numbers (scale/pool_summary.py), None when it did not run.
step_profile: a decode step of one sequence profiled (fused layers and op by op): ms, calls, Python's share.
token_bytes() counts what one decode token reads of each file (format/token_bytes.py; the GGUF's table).
"""
import statistics


def token_bytes(plan):
    """{engine: weight bytes one decode token reads}: the container's (Plan) and each GGUF's tensor table."""
    out = {"colibri": plan.token_bytes}
    if plan.tools is not None:
        from ..model import peer_llama
        for typ, path in plan.ggufs.items():
            out[f"llama.cpp {typ}"], _ = peer_llama.gguf_token_bytes(plan.tools, path, plan.top_k, plan.n_experts)
    return out


def _med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _ram_speeds(res, parallel, kind):
    """{prefill, decode: {pl}} of one engine's in-RAM result (None where it failed)."""
    if kind == "llama":                                                 # two llama-batched-bench runs
        pre, dec = res["prefill"].get("result"), res["decode"].get("result")
        return {"prefill": pre[1]["prefill_tok_s"] if pre else None,
                "decode": {pl: dec[pl]["decode_tok_s"] if dec else None for pl in parallel}}
    r = res.get("result")
    return {"prefill": r["prefill"]["prefill_tok_s"] if r else None,
            "decode": {pl: r["decode"][str(pl)]["decode_tok_s"] if r else None for pl in parallel}}


def _in_ram(report, plan):
    bw = _med([r["read_bandwidth"] for r in report["rounds"]])
    out = {}
    for name in plan.ram_engines:
        kind = plan.ram_engines[name]["kind"]
        runs = [_ram_speeds(r["in_ram"][name], plan.parallel, kind) for r in report["rounds"]]
        e = {"prefill_tok_s": _med([x["prefill"] for x in runs]),
             "decode_tok_s": {pl: _med([x["decode"][pl] for x in runs]) for pl in plan.parallel},
             "decode1_rounds": [x["decode"][plan.parallel[0]] for x in runs]}
        nbytes = report["bytes_per_token"].get("colibri" if kind == "colibri" else name)
        d1 = e["decode_tok_s"][plan.parallel[0]]
        e["bytes_per_token"] = nbytes
        e["decode1_of_bandwidth"] = nbytes * d1 / bw if nbytes and d1 and bw else None
        out[name] = e
    return out, bw


def _status(res):
    if res["rc"] == 0:
        return "ok"
    return "OOM-killed" if res.get("oom_kills") else f"failed (exit {res['rc']})"


def _limit_engine(res, plan, kind):
    r = res.get("result")
    e = {"status": _status(res), "peak": res.get("peak"), "process_read_bytes": res.get("read_bytes"),
         "seconds": res.get("seconds")}
    if r and kind == "colibri":
        d = r["decode"]["1"]
        e.update(decode_tok_s=d["decode_tok_s"], read_bytes_per_token=d["decode_read_bytes_per_token"],
                 hit_rate=d["decode_hit_rate"], resident_hit_rate=_resident_hit(d, plan),
                 first_token_s=r["startup"]["first_token_s"], peak_rss=r.get("peak_rss"))
    elif r:                                                   # llama.cpp: {pl: speeds}
        e.update(decode_tok_s=r[1]["decode_tok_s"], prefill_tok_s=r[1]["prefill_tok_s"])
    return e


def _resident_hit(d, plan):
    """1 - (loads that a get used) / gets: loads = bytes loaded / one expert's bytes, less unused prefetches."""
    st, gets = d.get("decode_store"), d.get("decode_gets")
    if not st or not gets:
        return None
    used = st["bytes_loaded"] / plan.expert_bytes - max(0, st["prefetch_issued"] - st["prefetch_used"])
    return max(0.0, 1.0 - used / gets)


def _bound(e, plan, ram_tok_s, disk):
    h = e.get("resident_hit_rate")
    if h is None or not e.get("decode_tok_s"):
        return
    must = (1.0 - h) * plan.expert_bytes_per_token
    e["must_read_per_token"] = must
    caps = [b for b in (ram_tok_s, disk / must if must > 0 else None) if b]   # in-RAM speed may be missing
    if not caps:
        return
    e["bound_tok_s"] = min(caps)
    e["of_bound"] = e["decode_tok_s"] / e["bound_tok_s"]
    e["read_over_must"] = e["read_bytes_per_token"] / must if must > 0 else None


def _limits(report, plan, ram):
    disk = _med([r["disk"]["bytes_per_s"] for r in report["rounds"]])
    ours = ram[next(iter(plan.ram_engines))]["decode_tok_s"][plan.parallel[0]]
    out = {}
    for frac in plan.limits:
        key = f"{frac:g}"
        per = {}
        for name, spec in plan.limit_engines.items():
            runs = [_limit_engine(r["limits"][key]["engines"][name], plan, spec["kind"]) for r in report["rounds"]]
            e = dict(runs[-1], decode_tok_s=_med([x.get("decode_tok_s") for x in runs]),
                     decode_rounds=[x.get("decode_tok_s") for x in runs], status=[x["status"] for x in runs])
            if spec["kind"] == "colibri":
                e["hit_rate"] = _med([x.get("hit_rate") for x in runs])
                e["resident_hit_rate"] = _med([x.get("resident_hit_rate") for x in runs])
                e["read_bytes_per_token"] = _med([x.get("read_bytes_per_token") for x in runs])
                _bound(e, plan, ours, disk)
                e["of_in_ram"] = e["decode_tok_s"] / ours if e["decode_tok_s"] and ours else None
            per[name] = e
        llama = [v["decode_tok_s"] for k, v in per.items() if plan.limit_engines[k]["kind"] == "llama"
                 and v["decode_tok_s"]]
        for k, v in per.items():
            if plan.limit_engines[k]["kind"] == "colibri" and llama and v["decode_tok_s"]:
                v["vs_best_llama"] = v["decode_tok_s"] / max(llama)
        out[key] = {"limit_bytes": report["rounds"][0]["limits"][key]["limit_bytes"], "engines": per}
    return out, disk


def _step_profile(report, plan):
    """{fused, op_by_op: {ms_per_step, calls_per_step, python_share}} medians over rounds (scale/step_profile.py)."""
    name = next(iter(plan.ram_engines))
    runs = [(r["in_ram"][name].get("result") or {}).get("step_profile") for r in report["rounds"]]
    runs = [p for p in runs if p]
    return {mode: {k: _med([p[mode][k] for p in runs if mode in p])
                   for k in ("ms_per_step", "calls_per_step", "python_share")}
            for mode in ("fused", "op_by_op") if any(mode in p for p in runs)}


def summarize(report, plan):
    from . import pool_summary
    ram, bw = _in_ram(report, plan)
    limits, disk = _limits(report, plan, ram)
    ours = ram[next(iter(plan.ram_engines))]
    llama = {k: v for k, v in ram.items() if plan.ram_engines[k]["kind"] == "llama"}
    ratios = {}
    for col in ["prefill"] + [f"decode {pl}" for pl in plan.parallel]:
        get = (lambda e: e["prefill_tok_s"]) if col == "prefill" else \
            (lambda e, pl=int(col.split()[1]): e["decode_tok_s"][pl])
        best = max((get(v) for v in llama.values() if get(v)), default=None)
        ratios[col] = get(ours) / best if best and get(ours) else None
    return {"in_ram": ram, "vs_best_llama": ratios, "read_bandwidth": bw, "disk_read_rate": disk,
            "limits": limits, "routing": report.get("routing"), "pool": pool_summary.summarize(report, plan),
            "step_profile": _step_profile(report, plan),
            "convert": report["files"]["colibri"]["convert"], "files": report["files"]}
