"""What the report of a generate/score job holds beyond every kind's fields, and how it is shown.

Role in the data flow: report.build_report asks the generation kinds for their fields (`fields`: the tokens
and finish reasons over every shard, and `this_run`: the Meter's per-step and per-request numbers: latency
percentiles, prefill/decode throughput over the time spent in steps, a per-second timeline, preemptions, the
KV cache's blocks and the prefix cache's hits, beside the executor's cache, workers and expert heat); the
summary table takes `summary_rows`, report.html the workers of this run and `figures` (generation_plots.py).
"""
from .metrics import fmt as _fmt, hit_rate_text, percentiles
from .report import executor_sections


def _ms3(p):
    return " / ".join(_fmt(None if p[k] is None else p[k] * 1e3, "{:,.1f}") for k in ("p50", "p90", "p99")) + " ms"


def summary_rows(rep):
    run = rep.get("this_run", {})
    thr, lat = run.get("throughput", {}), run.get("latency", {})
    rows = [("rows (all shards)", f"{rep['rows']:,}"), ("bad rows (error)", f"{rep['errors']:,}"),
            ("generated tokens", f"{rep['generated_tokens']:,}"), ("input tokens", f"{rep['input_tokens']:,}"),
            ("shards written / total", f"{rep['shards']['written_this_run']} / {rep['shards']['total']}"),
            ("executor", str(rep["job"].get("executor"))), ("startup", _fmt(rep.get("startup_s"), "{:.1f} s")),
            ("elapsed (this run)", _fmt(rep.get("elapsed_s_this_run"), "{:.2f} s"))]
    if thr:
        wall = rep.get("elapsed_s_this_run")
        rows += [("generated tokens/s (wall, this run)",
                  _fmt(thr.get("decode_tokens", 0) / wall if wall else None, "{:,.0f} tok/s")),
                 ("decode throughput", _fmt(thr.get("decode_tokens_per_s"), "{:,.0f} tok/s")),
                 ("prefill throughput", _fmt(thr.get("prefill_tokens_per_s"), "{:,.0f} tok/s"))]
    if lat.get("time_to_first_token_s", {}).get("n"):
        rows.append(("time to first token p50/p90/p99", _ms3(lat["time_to_first_token_s"])))
        rows.append(("request latency p50/p90/p99", _ms3(lat["request_latency_s"])))
    cache = run.get("cache")
    if cache:
        rows.append(("expert cache hit rate", hit_rate_text(cache)))
        rows.append(("cache hits / misses / evictions",
                     f"{cache['hits']:,} / {cache['misses']:,} / {cache['evictions']:,}"))
    if run.get("load_imbalance") is not None:
        rows.append(("load imbalance (max/mean)", _fmt(run["load_imbalance"], "{:.2f}")))
    acc = rep.get("task_accuracy")
    if acc:
        rows.append(("task accuracy (demo)", f"{acc['accuracy']:.1%} over {acc['rows']} prompts"))
        rows += [(f"  {task}", f"{a:.1%}") for task, a in sorted(acc["by_task"].items())]
    return rows


def fields(rep, cfg, done, meter, run):
    reasons = {}
    for info in done:
        for k, v in info.get("finish_reasons", {}).items():
            reasons[k] = reasons.get(k, 0) + v
    rep["job"]["on_error"] = cfg.job.on_error
    rep.update(generated_tokens=sum(i.get("tokens", 0) for i in done), input_tokens=sum(i.get("input_tokens", 0)
                                                                                      for i in done),
               finish_reasons=reasons, elapsed_s_this_run=run["elapsed_s"], this_run=this_run(meter, cfg))


def this_run(meter, cfg):
    out = executor_sections(meter, cfg)
    if out:
        out["samples"] = meter.samples
    kv = meter.kv_blocks
    out["kv_cache"] = {"blocks": kv, "min_free_blocks": meter.min_free_blocks,
                       "peak_used_blocks": None if kv is None or meter.min_free_blocks is None
                       else kv - meter.min_free_blocks}
    out["prefix_cache"] = _prefix_report(meter)
    rate = (lambda n: n / meter.step_s if meter.step_s > 0 else None)      # noqa: E731
    return {**out, "latency": {"time_to_first_token_s": percentiles(meter.ttft),
                               "request_latency_s": percentiles(meter.latency)},
            "throughput": {"prefill_tokens_per_s": rate(meter.prefill), "decode_tokens_per_s": rate(meter.decode),
                           "prefill_tokens": meter.prefill, "decode_tokens": meter.decode, "step_s": meter.step_s},
            "timeline": [meter.buckets[k] for k in sorted(meter.buckets)], "preemptions": meter.preemptions}


def _prefix_report(meter):
    """This run's prompt tokens looked up in the prefix cache and found there (vLLM's hit rate)."""
    if meter.prefix is None:
        return {"enabled": False}
    last, first = meter.prefix.stats(), meter.prefix_first
    q, h = last["queried_tokens"] - first["queried_tokens"], last["hit_tokens"] - first["hit_tokens"]
    return {"enabled": True, "queried_tokens": q, "hit_tokens": h, "hit_rate": h / q if q else None,
            "evictions": last["evictions"] - first["evictions"]}


def workers(rep):
    return (rep.get("this_run") or {}).get("workers") or []
