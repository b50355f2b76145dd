"""The pool stage of `colibri bench scale` (issue 29 item 4): a model bigger than one machine, over the pool.

Role: stage(plan, r) measures one round of greedy decode twice, in alternated order: in process with the whole
model in RAM (every expert read once first), and over a loopback Ray pool of plan.pool_workers expert workers
whose processes are each moved into a memory cgroup of plan.pool_fraction x the container (pool_groups.py), so
that no worker could hold the model and the pool can. The driver (the LLM: embeddings, attention, norms,
routers, LM head, KV cache, routing) runs in this process, outside the groups. Each engine is warmed up by a
decode of random tokens (text is a stream of mostly distinct tokens: it routes to most experts, where a random
model's greedy output loops on a few), then decodes greedily `plan.gen` tokens after a random prompt, for each
count of plan.pool_parallel sequences; recorded: tok/s, the tokens, the storage bytes each process read during
the decode steps (/proc/<pid>/io), and for the pool each worker's group (membership, resident model bytes,
usage, peak, failcnt, OOM kills), its home experts and the pool's off-home count.

Sharding: every worker maps the whole container, and the pool computes an expert on its home worker only with
replicas=0, the "home" balancer and coalesce_rows=0 (pool_config); its defaults would not shard a decode: a
decode micro-batch of <= 16 rows goes whole to one worker (coalesce_rows) and the token-bucket balancer
spills rows over a worker's cap to the other, so each worker would come to touch every expert.
"""
import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")    # before anything imports ray

import time                     # noqa: E402
import traceback                # noqa: E402

import numpy as np              # noqa: E402

from .limits import drop_cache                                          # noqa: E402
from .pool_groups import WorkerGroups, read_bytes, resident_bytes       # noqa: E402


def prompts(plan, r):
    """The round's inputs, the same for both engines: warm-up prompts and the random tokens fed to them, and
    one list of prompts per measured sequence count."""
    rng = np.random.default_rng(1000 + r)
    vocab, most = plan.cfg["vocab_size"], max(plan.pool_parallel)
    draw = lambda n: [rng.integers(0, vocab, plan.decode_prompt).tolist() for _ in range(n)]   # noqa: E731
    return {"warmup": draw(most), "stream": rng.integers(0, vocab, (plan.pool_warmup, most)).tolist(),
            "measured": {pl: draw(pl) for pl in plan.pool_parallel}}


def llm_options(plan):
    most = max(plan.pool_parallel)
    tokens = plan.decode_prompt + max(plan.pool_warmup, plan.gen) + 1
    return dict(threads=plan.threads, max_num_seqs=most, max_seq_len=tokens,
                kv_cache_bytes=plan.kv_bytes(most * tokens), enable_prefix_caching=False)


def warm_up(llm, work):
    """Prefill of the warm-up prompts, then one decode step per row of random tokens."""
    seqs = [llm.new_sequence() for _ in work["warmup"]]
    try:
        llm.forward([(s, p, False) for s, p in zip(seqs, work["warmup"])])
        for step in work["stream"]:
            llm.forward([(s, [int(t)], False) for s, t in zip(seqs, step)])
    finally:
        for s in seqs:
            llm.release(s)


def greedy(llm, prompts, gen, reads):
    """Prefill, then gen greedy decode steps of every sequence -> (tokens, decode seconds, {reader: storage bytes
    read during the decode steps}); reads() -> {reader: read_bytes now}."""
    seqs = [llm.new_sequence() for _ in prompts]
    try:
        logits = llm.forward([(s, p, False) for s, p in zip(seqs, prompts)])
        out = [[int(np.argmax(lg[-1]))] for lg in logits]
        r0, t0 = reads(), time.perf_counter()
        for _ in range(gen):
            logits = llm.forward([(s, [o[-1]], False) for s, o in zip(seqs, out)])
            for o, lg in zip(out, logits):
                o.append(int(np.argmax(lg[-1])))
        seconds, r1 = time.perf_counter() - t0, reads()
    finally:
        for s in seqs:
            llm.release(s)
    return out, seconds, {k: r1[k] - r0[k] for k in r0}


def measure(llm, work, gen, reads):
    """{pl: tok/s, seconds, tokens, storage bytes read per reader and per decoded token} of each sequence count."""
    out = {}
    for pl, ps in work["measured"].items():
        tokens, seconds, read = greedy(llm, ps, gen, reads)
        out[pl] = {"tok_s": pl * gen / seconds, "seconds": seconds, "tokens": tokens, "read_bytes": read,
                   "read_bytes_per_token": sum(read.values()) / (pl * gen)}
    return out


def in_process(plan, work, rec):
    """The LLM in this process with the whole model in RAM: every expert read once, warmed up, measured."""
    from ...model import LLM
    from ..model.peer_colibri import check_experts
    with LLM(plan.container, **llm_options(plan)) as llm:
        rec["precheck_s"] = check_experts(llm)
        warm_up(llm, work)
        rec["decode"] = measure(llm, work, plan.gen, lambda: {"process": read_bytes("self")})


def pool_config(plan):
    """Every expert on its home worker only (module doc); no restart (and no waiting for one): a worker
    OOM-killed in its group fails the stage instead of coming back outside it."""
    from ...pool import PoolConfig
    return PoolConfig(workers=plan.pool_workers, threads_per_worker=max(1, plan.threads // plan.pool_workers),
                      replicas=0, balancer="home", coalesce_rows=0, max_restarts=0, restart_timeout_s=5.0)


def home_experts(container, placement):
    """[(experts, bytes)] homed on each worker (the first of an expert's replicas)."""
    from ...format.reader import open_model
    with open_model(container) as m:
        size = {layer: m.expert_layout(layer).nbytes for layer in m.moe_layers}
    out = [[0, 0] for _ in range(placement["n_workers"])]
    for key, workers in placement["replicas"].items():
        out[workers[0]][0] += 1
        out[workers[0]][1] += size[int(key.split(":")[0])]
    return out


def on_pool(plan, work, limit, rec):
    """The same decode over the pool, each worker in its own group of `limit` bytes (removed at the end)."""
    groups = WorkerGroups(plan.pool_workers, limit)
    rec.update(groups=groups.names(), move_charge=groups.move_charge)
    try:
        with groups:
            _run_pool(plan, work, groups, rec)
    finally:
        rec["groups_at_exit"], rec["groups_removed"] = groups.final, groups.removed()


def _run_pool(plan, work, groups, rec):
    from ...model import LLM
    from ...pool import Pool
    pool = Pool(plan.container, pool_config(plan))
    try:
        rec["joined"] = groups.join(pool.worker_pids())
        with LLM(plan.container, moe=pool, w8a8=pool.w8a8, **llm_options(plan)) as llm:
            drop_cache(plan.container)     # nothing of the experts stays cached: each worker faults its own in
            t0 = time.perf_counter()
            warm_up(llm, work)
            rec["warmup_s"], rec["after_warmup"] = time.perf_counter() - t0, groups.facts(plan.container)
            reads = lambda: dict(groups.reads(), driver=read_bytes("self"))   # noqa: E731
            rec["decode"] = measure(llm, work, plan.gen, reads)
            rec["end"] = groups.facts(plan.container)
            rec["driver_resident_model_bytes"] = resident_bytes("self", plan.container)
        st = pool.stats()
        rec["off_home"], rec["worker_rows"] = st["off_home"], [w["tokens"] for w in st["workers"]]
        rec["home"] = home_experts(plan.container, st["placement"])
    finally:
        pool.shutdown()


def _recorded(fn):
    """What fn(record) filled in, its wall seconds and, when it failed, the traceback's tail (a failed engine is
    recorded with what it got to, not dropped)."""
    rec, t0 = {}, time.perf_counter()
    try:
        fn(rec)
    except Exception:
        rec["error"] = traceback.format_exc()[-3000:]
    rec["seconds"] = time.perf_counter() - t0
    return rec


def tokens_equal(rec):
    """{pl: the pool's greedy tokens == the in-process ones}, or None when either engine failed."""
    a, b = rec["in_process"].get("decode"), rec["pool"].get("decode")
    if not a or not b:
        return None
    return {pl: a[pl]["tokens"] == b[pl]["tokens"] for pl in a}


def stage(plan, r, log=print):
    """One round: in process and over the pool, in alternated order -> the round's record."""
    work, limit = prompts(plan, r), plan.limit_bytes(plan.pool_fraction)
    arms = {"in_process": lambda rec: in_process(plan, work, rec), "pool": lambda rec: on_pool(plan, work, limit, rec)}
    rec = {"workers": plan.pool_workers, "fraction": plan.pool_fraction, "limit_bytes": limit}
    for name in (list(arms) if r % 2 == 0 else list(reversed(arms))):
        rec[name] = _recorded(arms[name])
        log(f"round {r} pool stage, {name}: {'failed' if 'error' in rec[name] else 'done'} in "
            f"{rec[name]['seconds']:.0f} s")
    rec["tokens_equal"] = tokens_equal(rec)
    return rec
