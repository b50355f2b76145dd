"""Pool benchmark: Ray pool vs in-process Engine, per-call overhead, worker imbalance per balancer.

`python -m colibri_dist.bench pool [--quick] [--json PATH]`

Role: measures, in one run and on one synthetic Mixtral-style model (demo
generator: Zipf token popularity, a few hot experts):
  throughput   tokens/s of Pool(workers=W, threads_per_worker=T/W) over Engine(threads=T)
               for layer batches 256..8192 (same machine, same total threads T); the pool
               first measures loads on one batch and rebalances with replicas = experts/2;
  overhead     one-token moe_forward latency through the pool vs the engine;
  imbalance    rows per worker, max/mean per layer batch (what a batch waits for) and over
               the run, for token-bucket, round-robin and home-only
               replica choice (same placement: homes + EPLB replicas from measured loads)
               under the model's Zipf-skewed routing.
  policy       cosine of routing.policy=balanced to exact routing on the same stream.
Ratios are against baselines measured in the same run; results go to JSON.
"""
import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import numpy as np


def build_model(workdir, hidden, inter, experts, top_k, scheme="int8"):
    """A 1-layer demo-style Mixtral checkpoint converted to .colibri; returns (path, embed, token_probs)."""
    from ..config import DemoConfig
    from ..format.convert import convert
    from ..jobs.demo_model import generate_weights, write_checkpoint
    demo = DemoConfig(hidden=hidden, inter=inter, layers=1, experts=experts, top_k=top_k, vocab_size=512,
                      scheme=scheme)
    tensors, _, token_probs = generate_weights(demo)
    hf = os.path.join(workdir, "hf")
    os.makedirs(hf, exist_ok=True)
    write_checkpoint(hf, tensors, demo)
    path = convert(hf, os.path.join(workdir, "bench.colibri"), experts=scheme, progress=False)
    return path, tensors["model.embed_tokens.weight"], token_probs


def zipf_batch(embed, token_probs, n, rng):
    """Layer inputs whose routing follows the model's Zipf-skewed token popularity."""
    ids = rng.choice(len(embed), size=n, p=token_probs)
    x = embed[ids]
    return (x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5)).astype(np.float32)


def _time(fn, reps):
    fn()  # warm-up (page faults, caches, Ray object store)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def throughput(path, batches, sizes, threads, workers, reps, replicas, routing_at="caller"):
    from ..engine import Engine
    from ..pool import Pool
    rows = []
    with Engine(path, threads=threads) as eng, \
            Pool(path, workers=workers, threads_per_worker=max(1, threads // workers), routing_at=routing_at) as pool:
        layer = eng.model.moe_layers[0]
        pool.moe_forward(layer, batches(2048))  # measure expert loads, then place homes + replicas
        pool.rebalance(replicas=replicas)
        for n in sizes:
            x = batches(n)
            t_eng = _time(lambda: eng.moe_forward(layer, x), reps)
            s0 = pool.stats()
            t_pool = _time(lambda: pool.moe_forward(layer, x), reps)
            parts = _breakdown(s0, pool.stats(), reps + 1)
            rows.append({"tokens": n, "engine_tok_s": n / t_eng, "pool_tok_s": n / t_pool,
                         "ratio": t_eng / t_pool, "engine_s": t_eng, "pool_s": t_pool, "pool_parts": parts})
            print(f"  batch {n:>5}: engine {n / t_eng:>10.0f} tok/s  pool {n / t_pool:>10.0f} tok/s  "
                  f"ratio {t_eng / t_pool:.3f}  | per call: router route+dispatch "
                  f"{parts['route_dispatch_ms']:.1f} ms, wait {parts['collect_ms']:.1f} ms, combine "
                  f"{parts['combine_ms']:.1f} ms; worker busy {parts['worker_busy_ms']} ms, rows {parts['worker_rows']}")
        x1 = batches(1)
        t1_eng = _time(lambda: eng.moe_forward(layer, x1), max(5, reps * 3))
        t1_pool = _time(lambda: pool.moe_forward(layer, x1), max(5, reps * 3))
    overhead = {"engine_1tok_ms": t1_eng * 1e3, "pool_1tok_ms": t1_pool * 1e3,
                "per_call_overhead_ms": (t1_pool - t1_eng) * 1e3}
    print(f"  per-call: engine {t1_eng * 1e3:.2f} ms, pool {t1_pool * 1e3:.2f} ms "
          f"(overhead {(t1_pool - t1_eng) * 1e3:.2f} ms)")
    return rows, overhead


def _breakdown(before, after, calls):
    """Per-call Router phases and per-worker compute, from two stats() snapshots."""
    t0, t1 = before["timing"], after["timing"]
    out = {f"{k[:-2]}_ms": (t1[k] - t0[k]) / calls * 1e3 for k in t1}
    out["worker_busy_ms"] = [round((b["busy_s"] - a["busy_s"]) / calls * 1e3, 2)
                             for a, b in zip(before["workers"], after["workers"])]
    out["worker_rows"] = [round((b["tokens"] - a["tokens"]) / calls) for a, b in zip(before["workers"], after["workers"])]
    return out


def imbalance(path, batches, n, n_batches, workers, replicas):
    from ..pool import Pool
    out = {}
    for kind in ("token-bucket", "round-robin", "home"):
        with Pool(path, workers=workers, threads_per_worker=1, balancer=kind) as pool:
            layer = min(pool.list_experts())
            pool.moe_forward(layer, batches(n))          # measure loads ...
            pool.rebalance(replicas=replicas)            # ... then homes + EPLB replicas from them
            before = [w["tokens"] for w in pool.stats()["workers"]]
            per_batch = []
            for _ in range(n_batches):
                pool.moe_forward(layer, batches(n))
                last = np.array([w["last_batch_tokens"] for w in pool.stats()["workers"]], float)
                per_batch.append(float(last.max() / last.mean()))
            st = pool.stats()
            rows = np.array([w["tokens"] for w in st["workers"]]) - np.array(before)
            out[kind] = {"rows_per_worker": rows.tolist(), "max_over_mean_total": float(rows.max() / rows.mean()),
                         "max_over_mean_per_batch": float(np.mean(per_batch)), "off_home": st["off_home"]}
            print(f"  {kind:>12}: per layer batch max/mean {np.mean(per_batch):.3f}; "
                  f"over the run {rows.max() / rows.mean():.3f} (rows/worker {rows.tolist()})")
    return out


def expert_skew(path, batches, n):
    from ..engine import Engine
    with Engine(path, threads=1) as eng:
        layer = eng.model.moe_layers[0]
        idx, _ = eng.route(layer, batches(n))
        counts = np.bincount(idx.ravel(), minlength=eng.model.config.n_experts)
    return {"tokens_per_expert": counts.tolist(), "max_over_mean": float(counts.max() / counts.mean())}


def policy_cost(path, batches, n, n_batches):
    from ..engine import Engine
    from ..routing.policy import measure_cosine
    with Engine(path, threads=1) as eng:
        return measure_cosine(eng, eng.model.moe_layers[0], [batches(n) for _ in range(n_batches)])


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench pool")
    ap.add_argument("--quick", action="store_true", help="small model and sizes (smoke run, ~1 min)")
    ap.add_argument("--json", default=None, help="write results here (default: bench-pool.json)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="total threads, engine and pool alike")
    ap.add_argument("--workdir", default=None)
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.quick:
        dims, sizes, reps, imb = dict(hidden=128, inter=256, experts=16, top_k=2), [256, 2048], 2, (512, 4)
    else:
        dims, sizes, reps, imb = (dict(hidden=512, inter=1024, experts=16, top_k=2),
                                  [256, 512, 1024, 2048, 4096, 8192], 5, (2048, 16))
    workdir = args.workdir or tempfile.mkdtemp(prefix="colibri-bench-pool-")
    print(f"building model {dims} in {workdir}")
    path, embed, token_probs = build_model(workdir, **dims)
    rng = np.random.default_rng(0)
    batches = lambda n: zipf_batch(embed, token_probs, n, rng)
    from ..pool.ray_setup import connect
    connect(None)  # one local Ray (loopback) for every pool of this run
    print(f"throughput: engine threads={args.threads} vs pool workers={args.workers} "
          f"x {max(1, args.threads // args.workers)} threads")
    replicas = dims["experts"] // 2
    rows, overhead = throughput(path, batches, sizes, args.threads, args.workers, reps, replicas)
    print("imbalance under Zipf-skewed routing (rows per worker):")
    skew = expert_skew(path, batches, imb[0])
    balance = imbalance(path, batches, imb[0], imb[1], max(args.workers, 4), replicas=replicas)
    policy = policy_cost(path, batches, imb[0] // 4, 4)
    print(f"routing.policy=balanced vs exact: mean cosine {policy['mean_cosine']:.4f}, "
          f"min {policy['min_cosine']:.4f}, replaced {policy['replaced_share']:.3%}")
    result = {"bench": "pool", "quick": args.quick, "model": dims, "threads": args.threads,
              "workers": args.workers, "replicas": replicas, "host": platform.node(), "cpus": os.cpu_count(),
              "throughput": rows, "overhead": overhead, "expert_skew": skew, "imbalance": balance,
              "policy_balanced": policy,
              "target": {"ratio_at_ge_2048": 0.85,
                         "met": all(r["ratio"] >= 0.85 for r in rows if r["tokens"] >= 2048)}}
    out = args.json or "bench-pool.json"
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {out}")
    return 0
