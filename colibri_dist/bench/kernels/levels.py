"""`python -m colibri_dist.bench levels`: one expert's speed on every SIMD level this CPU has, alternated.

Role: the same-run comparison behind a kernel choice per level (docs/archive/PERFORMANCE-history.md "Issue 18 on a Zen 5").
One OLMoE-sized expert per scheme is copied into more buffers than the last-level cache holds (as in
kernels/shapes.py, so the weights stream from memory); every round times each (tokens, mode) on each level
in turn, the level order reversed every other round, and the report keeps the median over rounds of each
round's best pass. Speed differences between levels are all it measures: the levels give the same bits
(tests/native). Prints a table, writes JSON. No thresholds.
"""
import argparse
import json
import os
import sys

import numpy as np

from ...native import Runtime, simd_force, simd_levels
from .shapes import _copies, _time_pass

MODES = ["int4-g64+w4a8", "int4-g32+w4a8", "int8+w8a8"]
TOKENS = [1, 4, 8, 32, 256]


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench levels", description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--levels", default=None, help="comma-separated (default: every level this CPU has but scalar)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=1024)
    ap.add_argument("--mib", type=int, default=96, help="bytes of expert copies per scheme (MiB, >> L3)")
    ap.add_argument("--json", default="bench_levels.json")
    return ap.parse_args(argv)


def available(names):
    have = [lv for lv, missing in simd_levels().items() if missing is None]
    if names is None:
        return [lv for lv in have if lv != "scalar"]
    wanted = [lv.strip() for lv in names.split(",") if lv.strip()]
    for lv in wanted:
        if lv not in have:
            print(f"level {lv} skipped: {simd_levels().get(lv) or 'unknown level'}", file=sys.stderr)
    return [lv for lv in wanted if lv in have]


def measure(args, levels, modes, tokens):
    """{(mode, tokens, level): [seconds per round]}."""
    rng = np.random.default_rng(5)
    xs = {n: rng.standard_normal((n, args.hidden), dtype=np.float32) for n in tokens}
    views = {s: _copies(s, args.hidden, args.inter, args.mib << 20, rng)
             for s in dict.fromkeys(m.split("+")[0] for m in modes)}
    out = {}
    with Runtime(threads=args.threads) as plain, Runtime(threads=args.threads, w8a8=True) as quant:
        for rnd in range(args.rounds):
            for n in tokens:
                for mode in modes:
                    rt, vs = (quant if "+" in mode else plain), views[mode.split("+")[0]]
                    for lv in (levels if rnd % 2 == 0 else levels[::-1]):
                        with simd_force(lv):
                            rt.expert_forward(xs[n], vs[0])
                            t, _ = _time_pass(rt, vs, xs[n], 2 if n <= 32 else 1)
                        out.setdefault((mode, n, lv), []).append(t)
    return out, {s: v[0].nbytes for s, v in views.items()}


def main(argv=None):
    from .run import machine
    args = parse_args(list(sys.argv[2:] if argv is None else argv))
    levels = available(args.levels)
    if not levels:
        print("no level to measure", file=sys.stderr)
        return 2
    modes = [m for m in args.modes.split(",") if m]
    tokens = [int(t) for t in args.tokens.split(",") if t]
    raw, nbytes = measure(args, levels, modes, tokens)
    rows = []
    for (mode, n, lv), ts in raw.items():
        t = float(np.median(ts))
        rows.append({"mode": mode, "tokens": n, "level": lv, "seconds_median": t, "seconds_rounds": ts,
                     "gb_per_s": nbytes[mode.split("+")[0]] / t / 1e9})
    print("| mode | level | " + " | ".join(f"{n} tok" for n in tokens) + " |")
    print("|---|---|" + "---|" * len(tokens))
    for mode in modes:
        for lv in levels:
            cells = [next(f"{r['seconds_median'] * 1e6:,.0f} us" for r in rows
                          if (r["mode"], r["tokens"], r["level"]) == (mode, n, lv)) for n in tokens]
            print(f"| {mode} | {lv} | " + " | ".join(cells) + " |")
    report = {"command": " ".join([sys.executable, "-m", "colibri_dist.bench", "levels"] +
                                  list(sys.argv[2:] if argv is None else argv)),
              "machine": machine(), "threads": args.threads, "rounds": args.rounds, "rows": rows}
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.json}")
    return 0
