"""The outputs of `colibri bench scale`: the JSON report, markdown tables and a plot.

Role: markdown(report) renders the summary (scale/summary.py) as the tables docs/PERFORMANCE.md quotes (the pool
stage's section: scale/pool_summary.py); plot() draws in-RAM and under-limit decode speeds side by side, and the
pool against the engine in process when the pool stage ran (matplotlib, Agg); write() writes all three.
"""
import json

import numpy as np


def _f(v, fmt="{:.1f}"):
    return "-" if v is None else fmt.format(v)


def _gb(v):
    return "-" if v is None else f"{v / 1e9:.2f} GB"


def _mb(v):
    return "-" if v is None else f"{v / 1e6:.0f} MB"


def _ram_table(s):
    ram = s["in_ram"]
    pls = list(next(iter(ram.values()))["decode_tok_s"])
    head = "| engine | prefill | " + " | ".join(f"decode {p}" for p in pls) + \
        " | bytes/token | decode-1 x bytes / read bw |"
    rows = [head, "|" + "---|" * (4 + len(pls))]
    for name, e in ram.items():
        rows.append(f"| {name} | {_f(e['prefill_tok_s'], '{:.0f}')} | " +
                    " | ".join(_f(e["decode_tok_s"][p]) for p in pls) +
                    f" | {_mb(e['bytes_per_token'])} | {_f(e['decode1_of_bandwidth'], '{:.2f}x')} |")
    rows.append("| colibri / best llama.cpp | " + " | ".join(_f(v, "{:.2f}x") for v in s["vs_best_llama"].values())
                + " | | |")
    return "\n".join(rows)


def _limit_table(s):
    rows = ["| limit | engine | status | decode-1 tok/s | rounds | hit rate (store / resident) | read/token | must read/token | "
            "bound | of bound | read / must | vs best llama.cpp | of in-RAM | peak RSS | group peak |",
            "|" + "---|" * 15]
    for key, lim in s["limits"].items():
        for name, e in lim["engines"].items():
            rows.append(f"| {float(key):.0%} ({_gb(lim['limit_bytes'])}) | {name} | {', '.join(sorted(set(e['status'])))} "
                        f"| {_f(e['decode_tok_s'], '{:.2f}')} | {' / '.join(_f(v, '{:.2f}') for v in e['decode_rounds'])} "
                        f"| {_f(e.get('hit_rate'), '{:.2f}')} / {_f(e.get('resident_hit_rate'), '{:.2f}')} "
                        f"| {_mb(e.get('read_bytes_per_token'))} "
                        f"| {_mb(e.get('must_read_per_token'))} | {_f(e.get('bound_tok_s'), '{:.1f}')} "
                        f"| {_f(e.get('of_bound'), '{:.2f}x')} | {_f(e.get('read_over_must'), '{:.2f}x')} "
                        f"| {_f(e.get('vs_best_llama'), '{:.1f}x')} | {_f(e.get('of_in_ram'), '{:.2f}x')} "
                        f"| {_gb(e.get('peak_rss'))} | {_gb(e.get('peak'))} |")
    return "\n".join(rows)


def _llama_files(ll):
    if not ll:
        return ""
    if "error" in ll:
        return "; llama.cpp: its files could not be made (files.llama_cpp.error in the JSON)"
    steps = "; ".join(f"{k} {_f(v['seconds'], '{:.0f}')} s, peak RSS {_gb(v['peak_rss'])}"
                      for k, v in ll.get("steps", {}).items())
    return "".join(f"; llama.cpp {t} {_gb(g['bytes'])}" for t, g in ll["gguf"].items()) + (f" ({steps})" if steps else "")


def _profile_lines(prof):
    """One sentence on the profiled decode step (step_profile.py: the Python share is an upper bound)."""
    if not prof:
        return []
    parts = [f"{mode.replace('_', ' ')} {_f(p['ms_per_step'])} ms, {_f(p['calls_per_step'], '{:.0f}')} Python calls, "
             f"Python and numpy {_f(100 * p['python_share'] if p['python_share'] is not None else None)}%"
             for mode, p in prof.items()]
    return ["Decode step of 1 sequence, the C core's calls timed (layers fused into one native call each / op by op): "
            + "; ".join(parts) + ".", ""]


def markdown(report):
    s, m = report["summary"], report["machine"]
    rt = s.get("routing") or {}
    conv = s["convert"]
    lines = [f"### bench scale: {report['shape']}, {report['layers']} layers ({report['command']})", "",
             f"Host: {m['cpu']} (family {m['cpu_family']} model {m['cpu_model']}), {m['cpus']} CPUs, "
             f"AVX-512/AMX flags: {', '.join(f for f in m['cpu_flags'] if f.startswith(('avx512', 'amx'))) or 'none'}; "
             f"colibri SIMD level {m['simd_default']}; "
             f"{report['threads']} threads. Read bandwidth {_f(s['read_bandwidth'] / 1e9, '{:.1f}')} GB/s; disk "
             f"random reads of one expert {_f(s['disk_read_rate'] / 1e9, '{:.2f}')} GB/s (medians over rounds).", "",
             f"Routing measured (decode of one sequence): next-token expert reuse {_f(rt.get('reuse'), '{:.2f}')} "
             f"(chance {_f(rt.get('reuse_chance'), '{:.3f}')}), top-10% experts' share of slots "
             f"{_f(rt.get('top10_share'), '{:.2f}')}, experts used {_f(rt.get('used_fraction'), '{:.2f}')}; "
             f"knobs {report['routing_knobs']}.", "",
             f"Files: checkpoint {_gb(s['files']['checkpoint']['bytes'])} bf16; colibri container "
             f"{_gb(s['files']['colibri']['bytes'])}, convert {_f(conv.get('seconds'), '{:.0f}')} s, peak RSS "
             f"{_gb(conv.get('peak_rss'))} inside a memory cgroup of {_gb(conv.get('limit'))} (OOM kills "
             f"{conv.get('oom_kills')})" + _llama_files(s["files"].get("llama_cpp")) + ".", "",
             "In RAM (tok/s, medians):", "", _ram_table(s), ""] + _profile_lines(s.get("step_profile"))
    if s["limits"]:
        lines += ["Larger than RAM (memory cgroup around the process, cold page cache, 1 sequence):", "",
                  _limit_table(s), ""]
    from .pool_summary import markdown as pool_markdown
    lines += pool_markdown(s.get("pool"), report.get("pool_skipped"))
    return "\n".join(lines)


def plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = report["summary"]
    fig, axes = plt.subplots(1, 3 if s.get("pool") else 2, figsize=(18 if s.get("pool") else 12, 4.5))
    ram = s["in_ram"]
    pls = list(next(iter(ram.values()))["decode_tok_s"])
    x = np.arange(len(pls))
    for i, (name, e) in enumerate(ram.items()):
        axes[0].bar(x + i * 0.8 / len(ram), [e["decode_tok_s"][p] or 0 for p in pls], 0.8 / len(ram), label=name)
    axes[0].set_xticks(x + 0.4 - 0.4 / len(ram), [f"decode {p}" for p in pls])
    axes[0].set_ylabel("tok/s")
    axes[0].set_title("in RAM")
    axes[0].legend(fontsize=8)
    names = [n for lim in s["limits"].values() for n in lim["engines"]]
    names = list(dict.fromkeys(names))
    keys = list(s["limits"])
    x = np.arange(len(keys))
    for i, name in enumerate(names):
        axes[1].bar(x + i * 0.8 / max(1, len(names)), [s["limits"][k]["engines"][name]["decode_tok_s"] or 0
                                                        for k in keys], 0.8 / max(1, len(names)), label=name)
    axes[1].set_xticks(x + 0.4 - 0.4 / max(1, len(names)), [f"limit {float(k):.0%} of the file" for k in keys])
    axes[1].set_title("larger than RAM: decode 1 sequence")
    axes[1].legend(fontsize=8)
    if s.get("pool"):
        _pool_bars(axes[2], s["pool"])
    fig.suptitle(f"colibri bench scale: {report['shape']}, {report['layers']} layers, {report['machine']['cpu']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _pool_bars(ax, p):
    """Greedy decode tok/s per sequence count: in process (whole model in RAM) beside the pool."""
    pls = list(p["decode"])
    x = np.arange(len(pls))
    pool = f"pool: {p['workers']} workers, cgroup {p['fraction']:.0%} each"
    for i, (key, label) in enumerate((("in_process_tok_s", "in process, whole model in RAM"), ("pool_tok_s", pool))):
        ax.bar(x + i * 0.4, [p["decode"][pl][key] or 0 for pl in pls], 0.4, label=label)
    ax.set_xticks(x + 0.2, [f"decode {pl}" for pl in pls])
    ax.set_title("bigger than one machine: greedy decode")
    ax.legend(fontsize=8)


def write(report, args):
    text = markdown(report)
    print(text)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1, default=_json)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.plot:
        plot(report, args.plot)
    print(f"wrote {args.json}" + "".join(f", {p}" for p in (args.markdown, args.plot) if p))


def _json(o):
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
