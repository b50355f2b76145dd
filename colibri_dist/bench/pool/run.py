"""Pool benchmark: Ray pool vs in-process MoeExecutor, per-call overhead, worker imbalance per balancer.

`python -m colibri_dist.bench pool [--quick] [--json PATH] [--skip layer,router,imbalance,gen,sim]`

Role: measures, in one run and on one synthetic Mixtral-style model (demo
generator: Zipf token popularity, a few hot experts):
  throughput   tokens/s of Pool(workers=W, threads_per_worker=T/W) over MoeExecutor(threads=T)
               for layer batches 256..8192 (same machine, same total threads T); the pool
               first measures loads on one batch and rebalances with replicas = experts/2;
  overhead     one-token moe_forward latency through the pool vs the engine;
  imbalance    rows per worker, max/mean per layer batch (what a batch waits for) and over
               the run, for token-bucket, round-robin and home-only
               replica choice (same placement: homes + EPLB replicas from measured loads)
               under the model's Zipf-skewed routing.
  policy       cosine of routing.policy=balanced to exact routing on the same stream;
  throughput and overhead run twice: routing in the caller (default) and in the Router actor;
then (bench/pool/whole_model.py) generation through sequence runners on the whole-model bench model and
the scale simulation on several raylets. Ratios are against baselines measured in the same run;
results (and which targets of docs/POOL.md were met) go to JSON.
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
    from ...config import DemoConfig
    from ...format.convert import convert
    from ...demos.classifier import generate_weights, write_checkpoint
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
    from ...moe_executor import MoeExecutor
    from ...pool import Pool
    rows = []
    with MoeExecutor(path, threads=threads) as eng, \
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
    from ...pool import Pool
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
    from ...moe_executor import MoeExecutor
    with MoeExecutor(path, threads=1) as eng:
        layer = eng.model.moe_layers[0]
        idx, _ = eng.route(layer, batches(n))
        counts = np.bincount(idx.ravel(), minlength=eng.model.config.n_experts)
    return {"tokens_per_expert": counts.tolist(), "max_over_mean": float(counts.max() / counts.mean())}


def policy_cost(path, batches, n, n_batches):
    from ...moe_executor import MoeExecutor
    from ...routing.policy import measure_cosine
    with MoeExecutor(path, threads=1) as eng:
        return measure_cosine(eng, eng.model.moe_layers[0], [batches(n) for _ in range(n_batches)])


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench pool")
    ap.add_argument("--quick", action="store_true", help="small models and sizes (smoke run, ~2 min)")
    ap.add_argument("--json", default=None, help="write results here (default: bench-pool.json)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="total threads, engine and pool alike")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--skip", default="", help="comma list of sections to skip: layer,router,imbalance,gen,sim")
    ap.add_argument("--gen-seqs", type=int, default=32, help="concurrent sequences of the generation section")
    ap.add_argument("--gen-tokens", type=int, default=16, help="tokens generated per sequence")
    ap.add_argument("--sim-workers", default="1,2,4,8")
    ap.add_argument("--sim-raylets", type=int, default=4)
    return ap.parse_args(argv)


def layer_sections(args, skip, dims, sizes, reps, imb, workdir):
    """MoE-layer path (caller and Router routing), one-token overhead, balance: on one local Ray."""
    print(f"building model {dims} in {workdir}")
    path, embed, token_probs = build_model(workdir, **dims)
    rng = np.random.default_rng(0)
    batches = lambda n: zipf_batch(embed, token_probs, n, rng)
    out, replicas = {"model": dims, "replicas": dims["experts"] // 2}, dims["experts"] // 2
    for mode in ("caller", "router"):
        if "layer" in skip or (mode == "router" and "router" in skip):
            continue
        print(f"MoE layer, routing_at={mode}: engine threads={args.threads} vs pool workers={args.workers} "
              f"x {max(1, args.threads // args.workers)} threads")
        rows, overhead = throughput(path, batches, sizes, args.threads, args.workers, reps, replicas, mode)
        out[f"throughput_{mode}"], out[f"overhead_{mode}"] = rows, overhead
    if "imbalance" not in skip:
        print("imbalance under Zipf-skewed routing (rows per worker):")
        out["expert_skew"] = expert_skew(path, batches, imb[0])
        out["imbalance"] = imbalance(path, batches, imb[0], imb[1], max(args.workers, 4), replicas=replicas)
        out["policy_balanced"] = policy = policy_cost(path, batches, imb[0] // 4, 4)
        print(f"routing.policy=balanced vs exact: mean cosine {policy['mean_cosine']:.4f}, "
              f"min {policy['min_cosine']:.4f}, replaced {policy['replaced_share']:.3%}")
    return out, path


def targets(result):
    t = {}
    rows = result.get("throughput_caller")
    if rows:
        t["layer_ratio_256_ge_0.85"] = all(r["ratio"] >= 0.85 for r in rows if r["tokens"] == 256)
        t["layer_ratio_ge_2048_ge_0.95"] = all(r["ratio"] >= 0.95 for r in rows if r["tokens"] >= 2048)
        t["one_token_overhead_le_1ms"] = result["overhead_caller"]["per_call_overhead_ms"] <= 1.0
    gen = result.get("generation")
    if gen:
        t["generation_ratio_ge_0.8"] = max(gen[k]["ratio"] for k in gen if k.startswith("pool_")) >= 0.8
    sim = result.get("simulation")
    if sim:
        last = max(sim["points"], key=lambda p: (p["workers"], p["efficiency"]))
        t[f"sim_efficiency_at_{last['workers']}_ge_0.8"] = last["efficiency"] >= 0.8
    return t


def main(argv=None):
    from ..model.run import FULL, QUICK, checkpoint
    from .whole_model import generation, simulation
    from ...pool.ray_setup import connect, disconnect
    args = parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    if args.quick:
        dims, sizes, reps, imb, gen_cfg = (dict(hidden=128, inter=256, experts=16, top_k=2), [256, 2048], 2,
                                           (512, 4), QUICK)
    else:
        dims, sizes, reps, imb, gen_cfg = (dict(hidden=512, inter=1024, experts=16, top_k=2),
                                           [256, 512, 1024, 2048, 4096, 8192], 5, (2048, 16), FULL)
    workdir = args.workdir or tempfile.mkdtemp(prefix="colibri-bench-pool-")
    result = {"bench": "pool", "quick": args.quick, "threads": args.threads, "workers": args.workers,
              "host": platform.node(), "cpus": os.cpu_count()}
    connect(None)  # one local Ray (loopback) for every pool of the layer and generation sections
    layer, layer_model = layer_sections(args, skip, dims, sizes, reps, imb, workdir)
    result.update(layer)
    row_s = 2e-4
    if "gen" not in skip:
        _, gen_path = checkpoint(gen_cfg, os.path.join(os.path.expanduser("~"), ".cache", "colibri"))
        print(f"generation, whole-model bench model {gen_path}:")
        result["generation"] = gen = generation(gen_path, args.threads, args.workers, args.gen_seqs, 16,
                                                args.gen_tokens)
        row_s = gen["pool_lanes_1"]["row_s"]
    disconnect()
    if "sim" not in skip:
        counts = [int(w) for w in args.sim_workers.split(",")]
        print(f"simulation: {args.sim_raylets} raylets, workers sleep {row_s * 1e6:.0f} us per row (calibrated)")
        result["simulation"] = simulation(layer_model, counts, runners=4, steps=10, batch=64, layers=2,
                                          row_s=row_s, raylets=args.sim_raylets)
    result["targets"] = targets(result)
    out = args.json or "bench-pool.json"
    with open(out, "w") as f:
        json.dump(result, f, indent=2, default=str)
    print(f"targets: {result['targets']}\nwrote {out}")
    return 0
