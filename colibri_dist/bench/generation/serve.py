"""`python -m colibri_dist.bench serve [--model PATH] [--quick] [--clients 32] [--max-tokens 32] [--json PATH]`.

Role: what the HTTP server costs around the engine (docs/PERFORMANCE.md, "Serving"), all in one run:
  1. start-up: `colibri serve MODEL` as a subprocess, time from spawn to the first 200 of GET /health;
  2. served: --clients concurrent streaming clients (httpx, one connection each) send the same
     requests (token-id prompts, greedy, ignore_eos, --max-tokens each): per-request TTFT (first chunk),
     aggregate generated tokens/s over the wall time of the whole burst;
  3. in-process: the same requests added at once to an LLMEngine over cd.LLM in this process (the server
     stopped first, so the two never share the 2 cores), stepped to the end; the same figures.
Reports the served/in-process throughput ratio, TTFT p50/p99 of both, and the server's overhead per
streamed token = (served wall - in-process wall) / tokens. --rounds R repeats 2+3 alternately (served,
in-process, served, ...) and reports each round's ratio and their median: on a shared machine whose load
changes by minutes, a pair measured back to back is the fair comparison; the load average is recorded
beside each measurement, and so is the CPU time (server process, all threads, /proc; in-process: this
process) over each burst: served/in-process CPU is the server's extra work, which the load average hardly
moves. --workers N --runners M serve through the Ray pool instead (same requests). --health-flood adds a
burst served while another process floods GET /health, and its tok/s over the quiet burst's.
Default model: the whole-model benchmark model of `bench model` (made once into ~/.cache/colibri);
--quick: the demo LLM. No thresholds.
"""
import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time

import numpy as np


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench serve")
    ap.add_argument("--model", default=None, help=".colibri (default: the whole-model benchmark model)")
    ap.add_argument("--quick", action="store_true", help="the demo LLM instead (seconds, no torch)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=1, help="served/in-process pairs, measured alternately")
    ap.add_argument("--workers", type=int, default=0, help="serve with the experts on N Ray workers")
    ap.add_argument("--runners", type=int, default=0, help="... and M sequence runners (needs --workers)")
    ap.add_argument("--engine-in-process", action="store_true",
                    help="serve with `colibri serve --engine-in-process` (the engine thread beside the event loop)")
    ap.add_argument("--health-flood", action="store_true",
                    help="also serve the burst while another process floods GET /health (loopback, bounded)")
    ap.add_argument("--json", default=None)
    return ap.parse_args(argv)


def _model(args):
    if args.model:
        return args.model
    root = os.path.join(os.path.expanduser("~"), ".cache", "colibri")
    if args.quick:
        return _demo(root)
    from ..model.run import FULL, checkpoint
    return checkpoint(FULL, root)[1]


def _demo(root):
    from ...format.convert import convert
    from ...demos import llm as demo_llm
    d = os.path.join(root, "bench-serve-demo")
    dst = os.path.join(d, "m.colibri")
    if not os.path.exists(dst):
        demo_llm.write_checkpoint(os.path.join(d, "hf"), layers=2, n_experts=8)
        convert(os.path.join(d, "hf"), dst, progress=False, force=True)
    return dst


def _requests(vocab, n, prompt_tokens, max_tokens):
    rng = np.random.default_rng(0)
    return [{"prompt": [int(t) for t in rng.integers(3, vocab, prompt_tokens)], "max_tokens": max_tokens,
             "temperature": 0, "ignore_eos": True} for _ in range(n)]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model, threads, max_num_seqs, timeout=600.0, extra=()):
    """-> (Popen, url, seconds from spawn to the first healthy /health)."""
    import httpx
    port = _free_port()
    cmd = [sys.executable, "-m", "colibri_dist", "serve", model, "--port", str(port),
           "--max-num-seqs", str(max_num_seqs)] + (["--threads", str(threads)] if threads else []) + list(extra)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"colibri serve exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url, time.perf_counter() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("colibri serve did not become healthy")


async def _one(client, body, t0):
    first, tokens = None, 0
    async with client.stream("POST", "/v1/completions",
                             json=dict(body, stream=True, stream_options={"include_usage": True})) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and first is None:
                first = time.perf_counter() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return first, time.perf_counter() - t0, tokens


async def _burst(url, bodies, pid=None):
    """-> (per-request (ttft, end, tokens), wall s, the server's CPU s over the burst or None)."""
    import httpx
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await client.post("/v1/completions", json=dict(bodies[0], max_tokens=2))     # warm-up
        cpu0 = _cpu_s(pid) if pid else None
        t0 = time.perf_counter()
        got = await asyncio.gather(*(_one(client, b, t0) for b in bodies))
        wall = time.perf_counter() - t0
        cpu1 = _cpu_s(pid) if pid else None
    return got, wall, (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None


# another process that GETs /health as fast as it can, for at most `seconds` and 10^6 requests (loopback only)
FLOOD = ("import httpx, sys, time\nc = httpx.Client(base_url=sys.argv[1], timeout=5)\nc.get('/health')\n"
         "print('flooding', flush=True)\nend, n = time.time() + float(sys.argv[2]), 0\n"
         "while time.time() < end and n < 1000000:\n    c.get('/health'); n += 1\n")


def served(model, bodies, threads, extra=(), flood=False):
    """The burst against a fresh `colibri serve`; flood: while another process floods GET /health."""
    proc, url, startup = start_server(model, threads, max_num_seqs=len(bodies), extra=extra)
    flooder = None
    if flood:                          # the burst starts once the flood runs (its first answer came back)
        flooder = subprocess.Popen([sys.executable, "-c", FLOOD, url, "600"], stdout=subprocess.PIPE, text=True)
        flooder.stdout.readline()
    try:
        got, wall, cpu = asyncio.run(_burst(url, bodies, proc.pid))
    finally:
        if flooder is not None:
            flooder.kill()
            flooder.wait(30)
        proc.terminate()
        proc.wait(30)
    return startup, _summary([g[0] for g in got], [g[2] for g in got], wall, cpu)


def _cpu_s(pid):
    """User + system CPU seconds of process pid, all its threads (/proc/PID/stat); None off Linux."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def in_process(model, bodies, threads):
    from ...generate import SamplingParams
    from ...model import LLM
    with LLM(model, threads=threads, max_num_seqs=len(bodies)) as llm:
        eng = llm.new_engine()
        p = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
        eng.add_request("warm", bodies[0]["prompt"], p)
        list(eng.stream())
        cpu0, t0 = _cpu_s(os.getpid()), time.perf_counter()
        firsts, tokens = {}, {}
        for i, b in enumerate(bodies):
            eng.add_request(i, b["prompt"], SamplingParams(max_tokens=b["max_tokens"], temperature=0.0,
                                                           ignore_eos=True))
        for out in eng.stream():
            if out.outputs and out.outputs[0].token_ids and out.request_id not in firsts:
                firsts[out.request_id] = time.perf_counter() - t0
            if out.finished:
                tokens[out.request_id] = len(out.outputs[0].token_ids)
        wall, cpu1 = time.perf_counter() - t0, _cpu_s(os.getpid())
    return _summary([firsts[i] for i in range(len(bodies))], [tokens[i] for i in range(len(bodies))], wall,
                    cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None)


def _summary(ttfts, tokens, wall, cpu_s=None):
    t = np.array(ttfts, dtype=np.float64)
    n = max(int(sum(tokens)), 1)
    return {"wall_s": wall, "tokens": int(sum(tokens)), "tokens_per_s": sum(tokens) / wall, "cpu_s": cpu_s,
            "cpu_ms_per_token": None if cpu_s is None else cpu_s / n * 1e3,
            "load_average_after": os.getloadavg()[0],
            "ttft_ms": {"p50": float(np.percentile(t, 50) * 1e3), "p99": float(np.percentile(t, 99) * 1e3)},
            "tokens_per_request": sorted(set(tokens))}


def main(argv=None):
    args = _args(argv)
    model = _model(args)
    from ...format.reader import open_model
    m = open_model(model)
    try:
        vocab = ((m.meta if isinstance(m.meta, dict) else {}).get("source_config") or {}).get("vocab_size", 64)
    finally:
        m.close()
    bodies = _requests(vocab, args.clients, args.prompt_tokens, args.max_tokens)
    extra = (["--workers", str(args.workers)] if args.workers else []) + \
        (["--runners", str(args.runners)] if args.runners else []) + \
        (["--engine-in-process"] if args.engine_in_process else [])
    print(f"serve bench: {args.clients} streaming clients x {args.max_tokens} tokens on {model}"
          f"{' ' + ' '.join(extra) if extra else ''}; load average {os.getloadavg()[0]:.2f}", flush=True)
    rounds = [_round(model, bodies, args.threads, extra, k, args.health_flood) for k in range(max(1, args.rounds))]
    ratios = [r["served_over_in_process_tokens_per_s"] for r in rounds]
    res = {"bench": "serve", "model": model, "clients": args.clients, "prompt_tokens": args.prompt_tokens,
           "max_tokens": args.max_tokens, "host": platform.node(), "cpus": os.cpu_count(), "serve_flags": extra,
           "cpu": _cpu_name(), "rounds": rounds, "median_served_over_in_process": float(np.median(ratios)),
           "median_overhead_per_token_ms": float(np.median([r["overhead_per_token_ms"] for r in rounds]))}
    cpu = [r["served_over_in_process_cpu"] for r in rounds if "served_over_in_process_cpu" in r]
    if cpu:
        res["median_served_over_in_process_cpu"] = float(np.median(cpu))
        res["median_cpu_overhead_per_token_ms"] = float(np.median([r["cpu_overhead_per_token_ms"] for r in rounds
                                                                   if "cpu_overhead_per_token_ms" in r]))
    if args.health_flood:
        res["median_flooded_over_quiet"] = float(np.median([r["flooded_over_quiet"] for r in rounds]))
        print(f"  median flooded / quiet served: {res['median_flooded_over_quiet']:.3f}x")
    res.update({k: rounds[0][k] for k in ("startup_to_healthy_s", "served", "in_process",
                                          "served_over_in_process_tokens_per_s", "overhead_per_token_ms")})
    print(f"  median over {len(rounds)} round(s): served / in-process {res['median_served_over_in_process']:.3f}x, "
          f"overhead {res['median_overhead_per_token_ms']:.3f} ms per streamed token"
          + (f"; CPU x{res['median_served_over_in_process_cpu']:.3f}" if cpu else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


def _round(model, bodies, threads, extra, k, flood=False):
    load_before = os.getloadavg()[0]
    startup, srv = served(model, bodies, threads, extra)
    flooded = served(model, bodies, threads, extra, flood=True)[1] if flood else None
    eng = in_process(model, bodies, threads)
    r = {"round": k, "load_average_before": load_before, "startup_to_healthy_s": startup, "served": srv,
         "in_process": eng, "served_over_in_process_tokens_per_s": srv["tokens_per_s"] / eng["tokens_per_s"],
         "overhead_per_token_ms": (srv["wall_s"] - eng["wall_s"]) / max(srv["tokens"], 1) * 1e3}
    if srv["cpu_s"] is not None and eng["cpu_s"]:
        r["served_over_in_process_cpu"] = srv["cpu_s"] / eng["cpu_s"]          # load-robust: work, not wall
        r["cpu_overhead_per_token_ms"] = srv["cpu_ms_per_token"] - eng["cpu_ms_per_token"]
    if flooded is not None:
        r["flooded"], r["flooded_over_quiet"] = flooded, flooded["tokens_per_s"] / srv["tokens_per_s"]
    print(f"  round {k}: start-up to healthy {startup:.2f} s (load average {load_before:.2f} before)")
    for name, x in (("served", srv), ("/health flood", flooded), ("in-process", eng)):
        if x is None:
            continue
        print(f"    {name:<12} {x['tokens_per_s']:9.1f} tok/s  TTFT p50 {x['ttft_ms']['p50']:.0f} ms  "
              f"p99 {x['ttft_ms']['p99']:.0f} ms  wall {x['wall_s']:.2f} s  (load average {x['load_average_after']:.2f})")
    print(f"    served / in-process {r['served_over_in_process_tokens_per_s']:.3f}x; overhead "
          f"{r['overhead_per_token_ms']:.3f} ms per streamed token", flush=True)
    if "served_over_in_process_cpu" in r:
        print(f"    CPU: server {srv['cpu_s']:.2f} s vs in-process {eng['cpu_s']:.2f} s "
              f"(x{r['served_over_in_process_cpu']:.3f}, {r['cpu_overhead_per_token_ms']:.3f} ms CPU per streamed token)",
              flush=True)
    return r


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        return None
