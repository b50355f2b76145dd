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
token_bytes() counts what one decode token reads of each file (format/token_bytes.py; the GGUF's table).
"""
import statistics


def token_bytes(container, tools, ggufs, cfg):
    from ...format import token_bytes as tb
    from ...format.reader import open_model
    with open_model(container) as m:
        out = {"colibri": tb.ours(m)["total"]}
        top_k, n_exp = m.config.top_k, m.config.n_experts
    if tools is not None:
        from .. import peer_llama
        for typ, path in ggufs.items():
            out[f"llama.cpp {typ}"], _ = peer_llama.gguf_token_bytes(tools, path, top_k, n_exp)
    return out


def _med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _ram_speeds(res, parallel):
    """{prefill, decode: {pl}} of one engine's in-RAM result (None where it failed)."""
    if "prefill" in res and "decode" in res and "rc" not in res:        # llama.cpp: two runs
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
        runs = [_ram_speeds(r["in_ram"][name], plan.parallel) for r in report["rounds"]]
        e = {"prefill_tok_s": _med([x["prefill"] for x in runs]),
             "decode_tok_s": {pl: _med([x["decode"][pl] for x in runs]) for pl in plan.parallel},
             "decode1_rounds": [x["decode"][plan.parallel[0]] for x in runs]}
        nbytes = report["bytes_per_token"].get(name.split()[0] if name.startswith("colibri") else name)
        d1 = e["decode_tok_s"][plan.parallel[0]]
        e["bytes_per_token"] = nbytes
        e["decode1_of_bandwidth"] = nbytes * d1 / bw if nbytes and d1 and bw else None
        out[name] = e
    return out, bw


def _status(res):
    if res["rc"] == 0:
        return "ok"
    return "OOM-killed" if res.get("oom_kills") else f"failed (exit {res['rc']})"


def _limit_engine(res, plan):
    r = res.get("result")
    e = {"status": _status(res), "peak": res.get("peak"), "process_read_bytes": res.get("read_bytes"),
         "seconds": res.get("seconds")}
    if isinstance(r, dict) and "decode" in r:                # colibri
        d = r["decode"]["1"]
        e.update(decode_tok_s=d["decode_tok_s"], read_bytes_per_token=d["decode_read_bytes_per_token"],
                 hit_rate=d["decode_hit_rate"], resident_hit_rate=_resident_hit(d, plan),
                 first_token_s=r["startup"]["first_token_s"], peak_rss=r.get("peak_rss"))
    elif r:                                                   # llama.cpp
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
    e["bound_tok_s"] = min(ram_tok_s, disk / must) if must > 0 else ram_tok_s
    e["of_bound"] = e["decode_tok_s"] / e["bound_tok_s"]
    e["read_over_must"] = e["read_bytes_per_token"] / must if must > 0 else None


def _limits(report, plan, ram):
    disk = _med([r["disk"]["bytes_per_s"] for r in report["rounds"]])
    ours = ram[plan.ram_engines[0]]["decode_tok_s"][plan.parallel[0]]
    out = {}
    for frac in plan.limits:
        key = f"{frac:g}"
        per = {}
        for name in plan.limit_engines:
            runs = [_limit_engine(r["limits"][key]["engines"][name], plan) for r in report["rounds"]]
            e = dict(runs[-1], decode_tok_s=_med([x.get("decode_tok_s") for x in runs]),
                     decode_rounds=[x.get("decode_tok_s") for x in runs], status=[x["status"] for x in runs])
            if name.startswith("colibri"):
                e["hit_rate"] = _med([x.get("hit_rate") for x in runs])
                e["resident_hit_rate"] = _med([x.get("resident_hit_rate") for x in runs])
                e["read_bytes_per_token"] = _med([x.get("read_bytes_per_token") for x in runs])
                _bound(e, plan, ours or 0.0, disk)
                e["of_in_ram"] = e["decode_tok_s"] / ours if e["decode_tok_s"] and ours else None
            per[name] = e
        llama = [v["decode_tok_s"] for k, v in per.items() if k.startswith("llama") and v["decode_tok_s"]]
        for k, v in per.items():
            if k.startswith("colibri") and llama and v["decode_tok_s"]:
                v["vs_best_llama"] = v["decode_tok_s"] / max(llama)
        out[key] = {"limit_bytes": report["rounds"][0]["limits"][key]["limit_bytes"], "engines": per}
    return out, disk


def summarize(report, plan):
    ram, bw = _in_ram(report, plan)
    limits, disk = _limits(report, plan, ram)
    ours = ram[plan.ram_engines[0]]
    llama = {k: v for k, v in ram.items() if k.startswith("llama")}
    ratios = {}
    for col in ["prefill"] + [f"decode {pl}" for pl in plan.parallel]:
        get = (lambda e: e["prefill_tok_s"]) if col == "prefill" else \
            (lambda e, pl=int(col.split()[1]): e["decode_tok_s"][pl])
        best = max((get(v) for v in llama.values() if get(v)), default=None)
        ratios[col] = get(ours) / best if best and get(ours) else None
    return {"in_ram": ram, "vs_best_llama": ratios, "read_bandwidth": bw, "disk_read_rate": disk,
            "limits": limits, "routing": report.get("routing"),
            "convert": report["files"]["colibri"]["convert"], "files": report["files"]}
