"""Tables of `bench peer`: medians over rounds, ratios to the best llama.cpp column, markdown.

Role: pure functions over the report dict peer.py builds (no llama.cpp, no engine), so the tests can
check them on a made-up report. summarize() -> {"metrics", "engines": {name: {metric: {median, values,
loads}}, "bandwidth", "ratios"}; markdown() renders the speed table (tok/s, the load average before each
round's measurement beside it), then bytes per token against the bandwidth and the ratio table.
"""
import statistics


def metric_names(prompt, decode_prompt, gen, parallel):
    """[(metric, run key, pl, field)]: prefill 1 x prompt, then decode at each parallel count."""
    out = [(f"prefill 1x{prompt}", f"{prompt}x{gen}", 1, "prefill_tok_s")]
    return out + [(f"decode {pl} seq", f"{decode_prompt}x{gen}", pl, "decode_tok_s") for pl in parallel]


def _get(runs, key, pl):
    run = runs.get(key, {})
    return run.get(pl, run.get(str(pl)))


def summarize(report, prompt, decode_prompt, gen, parallel):
    metrics = metric_names(prompt, decode_prompt, gen, parallel)
    engines = {}
    for rec in report["rounds"]:
        for name, e in rec["engines"].items():
            row = engines.setdefault(name, {m: {"values": [], "loads": []} for m, *_ in metrics})
            for m, key, pl, field in metrics:
                got = _get(e["runs"], key, pl)
                if got is not None:
                    row[m]["values"].append(got[field])
                    row[m]["loads"].append(e["load_before"])
    for row in engines.values():
        for cell in row.values():
            cell["median"] = statistics.median(cell["values"]) if cell["values"] else None
    bws = [rec["read_bandwidth"]["bytes_per_s"] for rec in report["rounds"]]
    bw = statistics.median(bws)
    out = {"metrics": [m for m, *_ in metrics], "engines": engines, "read_bandwidth_median": bw,
           "read_bandwidth_values": bws, "read_bandwidth_loads": [r["read_bandwidth"]["load_before"]
                                                                  for r in report["rounds"]]}
    out["bandwidth"] = _bandwidth(engines, report.get("bytes_per_token", {}), bw,
                                  "decode 1 seq" if 1 in parallel else None)
    out["ratios"] = _ratios(engines, out["metrics"])
    return out


def _bandwidth(engines, nbytes, bw, decode1):
    out = {}
    for name, row in engines.items():
        tok_s = row[decode1]["median"] if decode1 else None
        if name in nbytes and tok_s:
            out[name] = {"bytes_per_token": nbytes[name], "bytes_per_s": nbytes[name] * tok_s,
                         "ratio_to_bandwidth": nbytes[name] * tok_s / bw}
    return out


def _ratios(engines, metrics):
    """{colibri engine: {metric: {"ratio", "vs"}}}: against the best llama.cpp median of that metric."""
    llama = {n: r for n, r in engines.items() if n.startswith("llama.cpp")}
    out = {}
    for name, row in engines.items():
        if name in llama or not llama:
            continue
        out[name] = {}
        for m in metrics:
            best = max(llama, key=lambda n: llama[n][m]["median"] or 0)
            ref, got = llama[best][m]["median"], row[m]["median"]
            if ref and got:
                out[name][m] = {"ratio": got / ref, "vs": best}
    return out


def _fmt(v):
    return "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def markdown(s):
    head = "| engine | " + " | ".join(s["metrics"]) + " | load avg before (per round) |"
    lines = [head, "|" + "---|" * (len(s["metrics"]) + 2)]
    for name, row in s["engines"].items():
        loads = row[s["metrics"][0]]["loads"]
        lines.append(f"| {name} | " + " | ".join(_fmt(row[m]["median"]) for m in s["metrics"]) +
                     " | " + ", ".join(f"{x:.1f}" for x in loads) + " |")
    bw = s["read_bandwidth_median"]
    lines += ["", f"Read bandwidth (median of rounds): {bw / 1e9:.1f} GB/s (rounds: " +
              ", ".join(f"{b / 1e9:.1f} at load {lo:.1f}" for b, lo in zip(s["read_bandwidth_values"],
                                                                          s["read_bandwidth_loads"])) + ")", ""]
    if s["bandwidth"]:
        lines += ["| engine | bytes/token | decode 1 seq bytes/s | x read bw |", "|---|---|---|---|"]
        for name, b in s["bandwidth"].items():
            lines.append(f"| {name} | {b['bytes_per_token'] / 1e6:.1f} MB | {b['bytes_per_s'] / 1e9:.1f} GB/s | "
                         f"{b['ratio_to_bandwidth']:.2f} |")
        lines.append("")
    if s["ratios"]:
        lines += ["| colibri vs best llama.cpp | " + " | ".join(s["metrics"]) + " |",
                  "|" + "---|" * (len(s["metrics"]) + 1)]
        for name, row in s["ratios"].items():
            lines.append(f"| {name} | " + " | ".join(
                f"{row[m]['ratio']:.2f}x ({row[m]['vs'][10:]})" if m in row else "-" for m in s["metrics"]) + " |")
    return "\n".join(lines) + "\n"
