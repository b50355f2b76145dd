"""report.json of a stress run: what ran, what broke on purpose, what came back.

Role in the data flow: the harness hands its counters (ledger, fault records,
RSS summary, pool stats) to `build_report`, which derives the verdict and
`exit_code` (1 on any mismatch, lost or duplicated token, unrecovered fault, or
a run that did no work), and `write_report` stores it atomically
(temp file + rename) so a half-written report never looks complete.
"""
import json
import os

from ..fsutil import atomic_write


TIERS = ("ram", "ssd", "mmap")
# store counters that add up over worker processes (gauges like resident_bytes do not)
COUNTERS = ("gets", "hits", "misses", "ram", "ssd", "mmap", "evictions", "bytes_loaded", "prefetch_issued",
            "prefetch_used", "prefetch_dropped", "prefetch_late", "checksum_failures", "spill_bytes", "bypass")


def hit_rates(cache_stats):
    """{tier: hits / lookups at that tier, "overall": hits / gets} from summed store stats.

    The store counts per tier {hits, misses} of the lookups that reached it: every
    get looks in RAM; a RAM miss looks in the SSD spill tier; what the SSD tier
    misses is read from the source (the container, "mmap").
    """
    out = {}
    for tier in TIERS:
        counts = cache_stats.get(tier)
        if isinstance(counts, dict):
            seen = counts.get("hits", 0) + counts.get("misses", 0)
            out[tier] = round(counts.get("hits", 0) / seen, 6) if seen else None
    gets = cache_stats.get("gets", 0)
    if gets:
        out["overall"] = round(cache_stats.get("hits", 0) / gets, 6)
    return out


def sum_stats(per_worker):
    """Sum numeric store stats over workers (nested dicts summed key by key)."""
    total = {}
    for stats in per_worker:
        _add_into(total, stats or {})
    return total


def _add_into(total, stats):
    for key, value in stats.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            total[key] = total.get(key, 0) + value
        elif isinstance(value, dict):
            _add_into(total.setdefault(key, {}), value)


def rss_verdict(rss, slack_bytes):
    """True when every worker's RSS growth stayed within its budget plus the slack."""
    if not rss:
        return False
    return all(w["peak_growth_bytes"] <= (w["budget_bytes"] or 0) + slack_bytes for w in rss.values())


def build_report(*, ledger, batches, elapsed_s, faults, planned, rss, rss_slack_bytes,
                 cache_stats, budget, run_info):
    injected, recovered, unrecovered = {}, {}, []
    for rec in faults:
        injected[rec.kind] = injected.get(rec.kind, 0) + 1
        if rec.recovered:
            recovered[rec.kind] = recovered.get(rec.kind, 0) + 1
        else:
            unrecovered.append(rec.as_dict())
    report = {
        "passed": None,
        "exit_code": None,
        "batches": batches,
        "tokens": ledger.tokens,
        "rows_checked": ledger.rows_checked,
        "mismatches": ledger.mismatches,
        "lost_tokens": ledger.lost,
        "duplicated_tokens": ledger.duplicated,
        "pool_errors": [msg for _, msg in ledger.errors[:20]],
        "faults_planned": planned,
        "faults_injected": injected,
        "faults_recovered": recovered,
        "faults_recovered_total": sum(recovered.values()),
        "faults_unrecovered": unrecovered,
        "faults": [rec.as_dict() for rec in faults],
        "rss_peak_bytes": {name: w["peak_bytes"] for name, w in rss.items()},
        "rss_budget_bytes": budget,
        "rss_slack_bytes": rss_slack_bytes,
        "rss_workers": rss,
        "rss_held": rss_verdict(rss, rss_slack_bytes),
        "elapsed_s": round(elapsed_s, 3),
        "tokens_per_s": round(ledger.tokens / elapsed_s, 2) if elapsed_s > 0 else 0.0,
        "hit_rates": hit_rates(cache_stats),
        "spill_bytes": int(cache_stats.get("spill_bytes", 0) or 0),
        "cache_stats": cache_stats,
        "run": run_info,
    }
    failed = (report["mismatches"] or report["lost_tokens"] or report["duplicated_tokens"]
              or unrecovered or report["batches"] == 0)
    report["passed"] = not failed
    report["exit_code"] = 1 if failed else 0
    return report


def write_report(report, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "report.json")
    text = json.dumps(report, indent=2, sort_keys=False, default=_jsonable) + "\n"
    atomic_write(path, [text.encode()])
    return path


def _jsonable(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return str(value)
