"""Pool benchmark, whole-model part: generation through sequence runners, and the scale simulation.

Role: called by bench/pool/run.py main (`python -m colibri_dist.bench pool`):
  generation   aggregate decode tok/s of N concurrent greedy sequences on the whole-model bench
               model (bench/model/run.py's OLMoE-shaped checkpoint): LLM in process vs RunnerPool
               (1 runner, W workers) with 1 and 2 lanes, tokens checked identical;
  simulation   throughput vs simulated worker count on several raylets (testing/simulate.py), the
               workers' per-row delay calibrated from the generation run's measured worker busy time.
"""
import time

import numpy as np


def generation(path, threads, workers, seqs, prompt_len, new_tokens, lanes_list=(1, 2)):
    """Aggregate decode tok/s of `seqs` concurrent greedy sequences: LLM in process (threads=T) vs
    RunnerPool(runners=1, workers=W, threads_per_worker=T/W, runner threads T) with 1 and 2 lanes."""
    from ...generate import SamplingParams
    from ...model import LLM
    from ...pool.runners import RunnerPool
    rng = np.random.default_rng(1)
    llm_kw = dict(threads=threads, max_num_seqs=seqs, max_num_batched_tokens=max(2048, seqs * prompt_len),
                  kv_cache_bytes=1 << 30)
    with LLM(path, **llm_kw) as llm:
        prompts = [rng.integers(0, llm.vocab_size, prompt_len).tolist() for _ in range(seqs)]
    params = SamplingParams(max_tokens=new_tokens, temperature=0, ignore_eos=True)

    def run(gen):
        gen(prompts, SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))  # warm-up: page cache, arenas, Ray
        t = time.perf_counter()
        outs = gen(prompts, params)
        dt = time.perf_counter() - t
        return outs, {"seconds": dt, "tokens": sum(len(o.token_ids) for o in outs),
                      "tok_s": sum(len(o.token_ids) for o in outs) / dt}

    with LLM(path, **llm_kw) as llm:
        ref, res = run(llm.generate)
    out = {"in_process": res, "seqs": seqs, "prompt_len": prompt_len, "new_tokens": new_tokens}
    print(f"  in-process: {res['tok_s']:.1f} tok/s ({seqs} sequences x {new_tokens} tokens)")
    for lanes in lanes_list:
        with RunnerPool(path, runners=1, lanes=lanes, workers=workers, threads_per_worker=max(1, threads // workers),
                        llm=llm_kw) as rp:
            outs, r = run(rp.generate)
            st = rp.stats()
        r["identical"] = [o.token_ids for o in outs] == [o.token_ids for o in ref]
        r["ratio"] = r["tok_s"] / res["tok_s"]
        r["worker_rows"] = [w["tokens"] for w in st["workers"]]
        r["worker_busy_s"] = [w["busy_s"] for w in st["workers"]]
        r["row_s"] = sum(r["worker_busy_s"]) / max(1, sum(r["worker_rows"]))
        r["timing"] = st["timing"]
        out[f"pool_lanes_{lanes}"] = r
        print(f"  pool (1 runner, {lanes} lane(s), {workers} workers): {r['tok_s']:.1f} tok/s, ratio "
              f"{r['ratio']:.3f}, identical {r['identical']}")
    return out


def simulation(path, worker_counts, runners, steps, batch, layers, row_s, raylets, min_request_rows=64):
    """Throughput vs simulated worker count (testing/simulate.py): tok/s and scaling efficiency; the
    largest count once more with PoolConfig.min_request_rows (fewer workers per call)."""
    from ...testing.simulate import SimCluster, simulate
    sim = SimCluster(raylets=raylets)
    rows = []
    try:
        for w in worker_counts:
            r = simulate(sim, path, workers=w, runners=runners, steps=steps, batch=batch, layers=layers, row_s=row_s)
            r["efficiency"] = r["tok_s"] / (w * rows[0]["tok_s"] / rows[0]["workers"]) if rows else 1.0
            rows.append(r)
            print(f"  {w} simulated workers: {r['tok_s']:.0f} tok/s, efficiency {r['efficiency']:.2f}")
        if min_request_rows and rows:
            w = worker_counts[-1]
            r = simulate(sim, path, workers=w, runners=runners, steps=steps, batch=batch, layers=layers, row_s=row_s,
                         min_request_rows=min_request_rows)
            r["efficiency"] = r["tok_s"] / (w * rows[0]["tok_s"] / rows[0]["workers"])
            r["min_request_rows"] = min_request_rows
            rows.append(r)
            print(f"  {w} simulated workers, min_request_rows={min_request_rows}: {r['tok_s']:.0f} tok/s, "
                  f"efficiency {r['efficiency']:.2f}")
    finally:
        sim.shutdown()
    return {"row_s": row_s, "runners": runners, "batch": batch, "layers": layers, "raylets": raylets,
            "points": rows}
