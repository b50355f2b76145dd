"""`python -m colibri_dist.bench store [--quick] [--json PATH] [--drop-caches]`.

Role in the data flow: measures the expert store against baselines taken in
the same run and writes JSON (docs/PERFORMANCE.md "Expert store"):
  1. tiers: load GB/s of ram hit, mmap, source pread, SSD spill raw and zstd
     against a raw sequential read (buffered and O_DIRECT) of the same file;
  2. zstd: ratio, compress/decode GB/s on int8 and bf16 blobs (random-normal
     weights and a converted tiny model) and the disk speed below which it pays;
  3. policies: hit rate of lru/lfu/lfru with and without prefetch against
     Belady's optimum and the uniform line c/N, on synthetic Zipf traces with
     temporal locality and on traces recorded from the tiny oracle models,
     plus the recall of the engine's one-layer lookahead;
  4. engine: one MoE layer all-mapped (fused) vs under RAM budgets and the SSD
     tier, with the outputs checked bit for bit against the mapped run.
"""
import argparse
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

from . import tiers, traces, zstd

FRACTIONS = (0.05, 0.1, 0.25, 0.5)


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench store")
    ap.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    ap.add_argument("--json", default=None, help="write results here")
    ap.add_argument("--drop-caches", action="store_true",
                    help="also measure cold reads (needs root: writes /proc/sys/vm/drop_caches)")
    ap.add_argument("--workdir", default=None, help="scratch dir on the disk to measure (default: a temp dir)")
    return ap.parse_args(argv)


def bench_tiers(workdir, quick, drop):
    hidden, inter, n = (512, 256, 24) if quick else (2048, 1024, 96)   # full: OLMoE-sized experts
    blobs = tiers.make_blobs(hidden, inter, "int8", count=4)
    model = tiers.BlobFile(os.path.join(workdir, "experts.bin"), blobs, n)
    try:
        r = tiers.tier_speeds(model, workdir, drop)
    finally:
        model.close()
    r.update(hidden=hidden, inter=inter, scheme="int8")
    return r


def bench_zstd(workdir, quick, disk_gbs):
    hidden, inter = (512, 256) if quick else (2048, 1024)
    samples = {}
    for scheme in ("int8", "bf16"):
        samples[f"random-normal {scheme} {hidden}x{inter}"] = tiers.make_blobs(hidden, inter, scheme, 1)[0][0]
    try:
        from ...format.reader import open_model
        for scheme in ("int8", "bf16"):
            path = _tiny(workdir, "mixtral", scheme)
            with open_model(path) as m:
                blobs = [np.asarray(m.expert_blob(l, e)) for l in m.moe_layers for e in range(m.config.n_experts)]
            samples[f"tiny mixtral {scheme} (all experts)"] = np.concatenate(blobs)
    except Exception as exc:       # torch/transformers missing: say so in the JSON
        samples_note = f"tiny-model samples skipped: {exc}"
    else:
        samples_note = None
    levels = (1, 3) if quick else (1, 3, 9)
    rows = zstd.zstd_table(samples, levels, disk_gbs)
    return {"disk_gbs": disk_gbs, "rows": rows, "note": samples_note}


def _tiny(workdir, family, scheme):
    from .models import convert_tiny
    return convert_tiny(family, workdir, scheme)


def bench_policies(quick):
    n_layers, n_experts = (4, 32) if quick else (8, 64)
    trace = traces.zipf_trace(n_layers=n_layers, n_experts=n_experts, top_k=4, batch=4,
                                    steps=400 if quick else 4000)
    preds = traces.noisy_predictions(trace, recall=0.7, n_experts=n_experts)
    return {"trace": {"kind": "zipf", "s": 1.1, "locality": 0.6, "layers": n_layers, "experts": n_experts,
                      "top_k": 4, "batch": 4, "steps": len(trace), "prefetch_recall": 0.7},
            "rows": traces.place_policies(trace, n_layers * n_experts, FRACTIONS, preds)}


def bench_model_traces(workdir, quick):
    from .models import record_trace
    out = []
    for family in (("mixtral",) if quick else ("mixtral", "olmoe", "qwen2_moe")):
        trace, preds, stats, n_experts, n_layers = record_trace(
            _tiny(workdir, family, "int8"), batches=20 if quick else 200, batch=2)
        n_total = n_experts * n_layers
        out.append({"family": family, "layers": n_layers, "experts": n_experts, "steps": len(trace),
                    "lookahead": stats["lookahead"], "engine_store": {k: stats[k] for k in (
                        "hits", "misses", "prefetch_issued", "prefetch_used", "evictions")},
                    "rows": traces.place_policies(trace, n_total, (0.25, 0.5, 0.75), preds)})
    return out


def _print(results):
    t = results["tiers"]
    print(f"tiers ({t['experts']} int8 experts of {t['expert_bytes'] / 2**20:.1f} MiB; "
          f"page cache dropped: {t['page_cache_dropped']})")
    for k in ("raw_buffered_gbs", "raw_direct_gbs", "raw_direct_expert_sized_gbs", "mmap_copy_gbs", "source_pread_gbs", "source_prefetch_gbs", "ram_hit_gbs_equiv",
              "ssd_raw_gbs", "ssd_zstd_gbs", "crc32_gbs", "spill_checksum_gbs", "source_fill_fresh_ram_gbs",
              "fresh_alloc_copy_gbs", "raw_buffered_cold_gbs", "source_pread_cold_gbs"):
        if k in t:
            print(f"  {k:26s} {t[k]:8.2f}")
    print(f"  ssd raw / raw O_DIRECT read   {t['ssd_raw_vs_raw_direct']:.2f} "
          f"(/ expert-sized O_DIRECT reads {t['ssd_raw_vs_raw_direct_expert_sized']:.2f})")
    print(f"  source pread / raw buffered   {t['source_pread_vs_raw_buffered']:.2f}")
    print("zstd (disk %.2f GB/s):" % results["zstd"]["disk_gbs"])
    for r in results["zstd"]["rows"]:
        print(f"  {r['sample']:40s} L{r['level']} ratio {r['ratio']:.3f} decode {r['decode_gbs']:.2f} GB/s "
              f"pays below {r['breakeven_disk_gbs']:.2f} GB/s disk")
    for name, rows in [("synthetic zipf", results["policies"]["rows"])] + \
            [(f"tiny {m['family']}", m["rows"]) for m in results.get("model_traces", [])]:
        print(f"hit rates, {name}:")
        for r in rows:
            cols = " ".join(f"{k}={v:.3f}" for k, v in r.items()
                            if k not in ("fraction", "capacity") and not k.endswith("_loads"))
            print(f"  c={r['capacity']:4d} {cols}")
    for m in results.get("model_traces", []):
        print(f"lookahead recall, tiny {m['family']}: {m['lookahead']['recall']}")
    e = results["engine"]
    print(f"engine, one layer ({e['experts']} int8 experts {e['hidden']}x{e['inter']}, top {e['top_k']}, "
          f"{e['tokens']} tokens):")
    for r in e["rows"]:
        print(f"  {r['setup']:40s} {r['ms']:8.2f} ms  x{r.get('vs_mapped', 1.0):.2f}  exact={r['exact']}")


def main(argv=None):
    args = _args(sys.argv[1:] if argv is None else argv)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="colibri-bench-store-", dir=args.workdir) as workdir:
        results = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                               "python": platform.python_version()},
                   "command": "python -m colibri_dist.bench store " + " ".join(argv or sys.argv[1:]),
                   "quick": args.quick}
        results["tiers"] = bench_tiers(workdir, args.quick, args.drop_caches)
        disk = results["tiers"]["raw_direct_gbs"]
        results["zstd"] = bench_zstd(workdir, args.quick, disk)
        results["policies"] = bench_policies(args.quick)
        from .engine import engine_tiers
        results["engine"] = engine_tiers(workdir, args.quick)
        try:
            results["model_traces"] = bench_model_traces(workdir, args.quick)
        except Exception as exc:
            results["model_traces_error"] = f"{type(exc).__name__}: {exc}"
    results["seconds"] = time.time() - t0
    _print(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=float)
        print(f"wrote {args.json}")
    return 0
