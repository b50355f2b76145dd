"""The numbers and the table of the pool stage of `colibri bench scale` (scale/pool.py).

Role: summarize(report, plan) turns the rounds' pool records into summary["pool"]:
  decode    per sequence count: the pool's and the in-process engine's greedy decode tok/s (medians over rounds,
            and each round's), pool / in process, and the storage bytes read per decoded token during the
            measured steps (worst round): the pool's workers and its driver together, and each of them;
  workers   per worker (last round that ran): its pid, its group, whether /proc/<pid>/cgroup showed it in the
            group after the join and at the end, its home experts and their bytes, the model file's bytes
            resident in its mappings and its group's usage after the warm-up, the group's peak, failcnt
            (during the measured decode too) and OOM kills, the expert rows it computed;
  and whether every round's tokens equal the in-process ones, the OOM kills in the groups over all rounds, whether
  the groups were removed, errors by round.
markdown(s) renders it as the report's section.
"""
import statistics


def _med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _worst(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _runs(recs, arm, pl):
    return [rec[arm]["decode"][pl] for rec in recs if rec[arm].get("decode")]


def _decode(recs, pl, gen):
    pool, local = _runs(recs, "pool", pl), _runs(recs, "in_process", pl)
    p, i = _med([d["tok_s"] for d in pool]), _med([d["tok_s"] for d in local])
    readers = sorted({k for d in pool for k in d["read_bytes"]})
    return {"pool_tok_s": p, "in_process_tok_s": i, "of_in_process": p / i if p and i else None,
            "pool_rounds": [d["tok_s"] for d in pool], "in_process_rounds": [d["tok_s"] for d in local],
            "read_bytes_per_token": _worst([d["read_bytes_per_token"] for d in pool]),
            "read_bytes_per_token_by_reader": {k: _worst([d["read_bytes"].get(k, 0) / (pl * gen) for d in pool])
                                               for k in readers},
            "in_process_read_bytes_per_token": _worst([d["read_bytes_per_token"] for d in local])}


def _workers(p):
    """One row per worker of a pool record that got to the end of its decode."""
    out = []
    for i, (joined, warm, end) in enumerate(zip(p["joined"], p["after_warmup"], p["end"])):
        home = p.get("home") or [[None, None]] * len(p["joined"])
        out.append({"pid": joined["pid"], "group": p["groups"][i], "came_from": joined["from"],
                    "in_group_after_join": joined["now"] == p["groups"][i], "in_group_at_end": end["in_group"],
                    "home_experts": home[i][0], "home_expert_bytes": home[i][1],
                    "resident_model_bytes_after_warmup": warm["resident_model_bytes"],
                    "resident_model_bytes_at_end": end["resident_model_bytes"],
                    "group_usage_after_warmup": warm["group"]["usage"], "group_peak": end["group"]["peak"],
                    "failcnt": end["group"]["failcnt"],
                    "failcnt_during_decode": end["group"]["failcnt"] - warm["group"]["failcnt"],
                    "oom_kills": end["group"]["oom_kills"],
                    "rows": (p.get("worker_rows") or [None] * len(p["joined"]))[i]})
    return out


def _errors(recs):
    return {f"round {r} {arm}": rec[arm]["error"].strip().splitlines()[-1]
            for r, rec in enumerate(recs) for arm in ("in_process", "pool") if "error" in rec[arm]}


def summarize(report, plan):
    recs = [r["pool"] for r in report["rounds"] if r.get("pool")]
    if not recs:
        return None
    done = [rec["pool"] for rec in recs if "end" in rec["pool"]]
    equal = [all(rec["tokens_equal"].values()) for rec in recs if rec["tokens_equal"] is not None]
    return {"workers": plan.pool_workers, "fraction": plan.pool_fraction, "limit_bytes": recs[0]["limit_bytes"],
            "container_bytes": plan.container_bytes, "expert_bytes": plan.all_expert_bytes,
            "non_expert_bytes": plan.container_bytes - plan.all_expert_bytes, "gen": plan.gen,
            "warmup_steps": plan.pool_warmup, "decode": {pl: _decode(recs, pl, plan.gen) for pl in plan.pool_parallel},
            "tokens_equal": all(equal) if len(equal) == len(recs) else False,
            "tokens_equal_rounds": [rec["tokens_equal"] for rec in recs],
            "groups_removed": all(rec["pool"].get("groups_removed") for rec in recs),
            "oom_kills": sum(g["oom_kills"] for rec in recs for g in rec["pool"].get("groups_at_exit", [])),
            "move_charge": recs[0]["pool"].get("move_charge"),
            "off_home": done[-1].get("off_home") if done else None,
            "driver_resident_model_bytes": done[-1].get("driver_resident_model_bytes") if done else None,
            "workers_detail": _workers(done[-1]) if done else [], "errors": _errors(recs)}


def _f(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v)


def _size(v):
    if v is None:
        return "-"
    return f"{v / 1e9:.2f} GB" if v >= 1e9 else f"{v / 1e6:.2f} MB" if v >= 1e6 else f"{v / 1e3:.1f} kB"


def _decode_table(s):
    rows = ["| decode (sequences) | in process, whole model in RAM (tok/s) | pool (tok/s) | rounds (pool) "
            "| pool / in process | storage read / token, pool (worst round) | in process |", "|" + "---|" * 7]
    for pl, d in s["decode"].items():
        rows.append(f"| {pl} | {_f(d['in_process_tok_s'])} | {_f(d['pool_tok_s'])} | "
                    f"{' / '.join(_f(v) for v in d['pool_rounds'])} | {_f(d['of_in_process'], '{:.2f}x')} | "
                    f"{_size(d['read_bytes_per_token'])} | {_size(d['in_process_read_bytes_per_token'])} |")
    return rows


def _worker_table(s):
    rows = ["| worker | pid | in its group (join / end) | home experts | home bytes | model resident "
            "| group usage after warm-up | group peak | failcnt (in decode) | OOM kills | rows |", "|" + "---|" * 11]
    for i, w in enumerate(s["workers_detail"]):
        rows.append(f"| {i} | {w['pid']} | {w['in_group_after_join']} / {w['in_group_at_end']} | {w['home_experts']} | "
                    f"{_size(w['home_expert_bytes'])} | {_size(w['resident_model_bytes_at_end'])} | "
                    f"{_size(w['group_usage_after_warmup'])} | {_size(w['group_peak'])} | {w['failcnt']} "
                    f"({w['failcnt_during_decode']}) | {w['oom_kills']} | {w['rows']} |")
    return rows


def markdown(s, skipped=None):
    if s is None:
        return [f"Pool stage: skipped ({skipped}).", ""] if skipped else []
    lines = [f"Bigger than one machine (pool stage): {s['workers']} expert workers on a loopback Ray, each process "
             f"moved into a memory cgroup of {s['fraction']:.0%} of the container ({_size(s['limit_bytes'])} of "
             f"{_size(s['container_bytes'])}; experts {_size(s['expert_bytes'])}), each expert computed on its home "
             f"worker only (off-home {s['off_home']}); the driver (embeddings, attention, norms, routers, LM head, KV "
             f"cache; {_size(s['non_expert_bytes'])} of the file is not experts, "
             f"{_size(s['driver_resident_model_bytes'])} resident in it) runs in the bench process outside them. "
             f"Greedy decode of {s['gen']} tokens after "
             f"{s['warmup_steps']} warm-up steps of random tokens; tokens equal to in process: {s['tokens_equal']}; "
             f"workers OOM-killed: {s['oom_kills']}; groups removed: {s['groups_removed']}.", ""]
    lines += _decode_table(s) + [""] + _worker_table(s) + [""]
    lines += [f"- {k}: {v}" for k, v in s["errors"].items()] + ([""] if s["errors"] else [])
    return lines
