"""RunnerPool: data-parallel sequence runners over one shared expert pool; generate / score.

Role in the data flow:
    RunnerPool(path, runners=R, workers=W)  ->  a Pool (Router control plane + W ExpertWorkers)
                                               + R SequenceRunner actors (runner.py), each routing
                                               its own MoE traffic over the W workers
    generate(prompts, params)               ->  every request submitted FINAL_ONLY to the engine client
                                               over the runners (runner_client.py: the least loaded
                                               runner, i.e. request i on runner i mod R), with its
                                               global request id (its RNG seed), and polled until all
                                               are finished
A runner that dies loses nothing: the client re-submits its unfinished requests to another live
runner (or to the same actor once Ray restarted it) with the tokens committed so far, and they
continue exactly where they were (deterministic sampling). Results come back in prompt order,
bit-identical to LLM(path).generate(...) in process.
"""
import dataclasses

import ray

from ..errors import InvalidArgument
from ..generate.client import FINAL_ONLY
from .facade import Pool, _unwrap
from .ray_setup import numa_slots, slot_count
from .runner import SequenceRunner
from .runner_client import RunnerClient

RunnerActor = ray.remote(SequenceRunner)
LLM_KEYS = ("threads", "kv_cache_bytes", "max_seq_len", "kv_cache_dtype", "block_size", "max_num_batched_tokens",
            "max_num_seqs", "seed", "max_model_len", "enable_prefix_caching", "allow_long_context", "checksums",
            "w8a8", "max_logprobs")


class RunnerPool:
    def __init__(self, path, config=None, runners=None, ray_address=None, lanes=2, runner_resources="auto",
                 llm=None, pool=None, **pool_options):
        """runners: SequenceRunner actors (None = one per runner_numa_<i> slot of the cluster, i.e. one
        per NUMA node of each machine, or 1 without such slots); lanes: schedulers stepping in turn
        inside each (2 = two micro-batches in flight); runner_resources: "auto" (runner_numa slots when
        there are enough) | "numa" (required) | None | [dict per runner]; llm: LLM keyword arguments of
        every runner (threads, kv_cache_bytes, max_num_seqs, seed, ...); pool: a running Pool (or one
        attached by name) to put the runners on instead of starting one (shutdown leaves it running);
        the rest: Pool."""
        self._check(runners, lanes, llm, runner_resources)
        self._owns_pool = pool is None
        self.pool = Pool(path, config, ray_address, **pool_options) if pool is None else pool
        self.path, self.config, self.lanes = str(path), self.pool.config, int(lanes)
        self.llm_kwargs = dict(llm or {})
        try:
            h = _unwrap(self.pool._router.handles.remote())
            self._workers, self._info = h["workers"], h["info"]
            if runners is None:  # one per NUMA node of each machine (its runner_numa slots), else one
                runners = slot_count("runner_") or 1
            self.n_runners = runners
            self.resources = self._resources(runners, runner_resources)
            self.runners = [self._spawn(i) for i in range(runners)]
            self.runner_info = ray.get([r.ping.remote() for r in self.runners])
        except BaseException:
            self._kill_runners()
            if self._owns_pool:
                self.pool.shutdown(stop_service=True)
            raise
        self.client = RunnerClient(self.runners)

    @staticmethod
    def _check(runners, lanes, llm, runner_resources):
        for name, v in (("runners", 1 if runners is None else runners), ("lanes", lanes)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(f"RunnerPool: {name} must be an integer >= 1, got {v!r}")
        unknown = sorted(set(llm or {}) - set(LLM_KEYS))
        if unknown:
            raise InvalidArgument(f"RunnerPool: unknown llm option(s) {unknown}; expected {list(LLM_KEYS)}")
        rr = runner_resources
        if not (rr is None or rr in ("numa", "auto") or (isinstance(rr, (list, tuple)) and runners is not None
                                                            and len(rr) == runners)):
            raise InvalidArgument(f"RunnerPool: runner_resources must be None, 'numa', 'auto' or one dict per runner, "
                                  f"got {rr!r}")

    def _resources(self, runners, rr):
        """"numa": one runner per runner_numa_<i> slot (cluster/numa-resources.sh: one per NUMA node of
        each machine), the runner pinned to that node; "auto": the same when the cluster has enough."""
        self.numa_nodes = [None] * runners
        if rr in ("numa", "auto"):
            slots = numa_slots(runners, required=rr == "numa", prefix="runner_")
            if slots:
                self.numa_nodes = [s[1] for s in slots]
                return [s[0] for s in slots]
            return [None] * runners
        return list(rr) if rr is not None else [None] * runners

    def _spawn(self, i):
        opts = dict(num_cpus=0, max_restarts=self.config.max_restarts, max_task_retries=0, max_concurrency=4,
                    resources=self.resources[i] or None)
        return RunnerActor.options(**opts).remote(self.path, i, self.config, self._workers, self._info,
                                                  self.llm_kwargs, self.lanes, self.numa_nodes[i], self.n_runners)

    # ------------------------------------------------------------------ jobs
    def generate(self, prompts, sampling_params=None, request_ids=None):
        """-> list[Completion] in prompt order (LLM.generate's shapes and request ids)."""
        from ..generate.api import _params_list
        from ..generate.prompts import as_prompt_list
        items = as_prompt_list(prompts)
        params = [_plain(p) for p in _params_list(sampling_params, len(items))]
        return self._run([{"rid": _rid(request_ids, i), "kind": "generate", "prompt": it, "params": p}
                          for i, (it, p) in enumerate(zip(items, params))])

    def score(self, prompts, request_ids=None):
        from ..generate.prompts import as_prompt_list
        return self._run([{"rid": _rid(request_ids, i), "kind": "score", "prompt": it, "params": None}
                          for i, it in enumerate(as_prompt_list(prompts))])

    def _run(self, items):
        if len({it["rid"] for it in items}) != len(items):
            raise InvalidArgument("RunnerPool: request ids must be unique")
        client, results = self.client, {}
        client.revive()
        client.sent = {}                   # this call's submits per runner (one per runner and resubmission)
        try:
            for it in items:
                client.submit(it["rid"], it["prompt"], it["params"], output_kind=FINAL_ONLY, kind=it["kind"])
            while len(results) < len(items):
                for out in client.poll(None):
                    results[out.request_id] = out
        except BaseException:
            for it in items:
                if it["rid"] not in results:
                    client.abort(it["rid"])
            raise
        return [results[it["rid"]] for it in items]

    @property
    def _submits(self):
        return self.client.sent

    @property
    def resubmits(self):
        return self.client.resubmits

    @property
    def resumed_tokens(self):
        return self.client.resumed_tokens

    @property
    def lost(self):
        return self.client.lost

    # ------------------------------------------------------------------ status and lifetime
    def stats(self):
        counters, runners = [], []
        for i, r in enumerate(self.runners):
            try:
                counters.append(ray.get(r.counters.remote(), timeout=30))
                runners.append(dict(ray.get(r.stats.remote(), timeout=30), alive=True))
            except Exception as exc:
                runners.append({"index": i, "alive": False, "error": str(exc)})
        st = _unwrap(self.pool._router.stats.remote(counters, "runners"))
        st.update(runners=runners, resubmits=self.resubmits, resumed_tokens=self.resumed_tokens,
                  lost_runners=list(self.lost))
        return st

    def runner_pids(self):
        return [ray.get(r.ping.remote())["pid"] for r in self.runners]

    def _kill_runners(self):
        for r in getattr(self, "runners", []):
            try:
                ray.kill(r, no_restart=True)
            except Exception:
                pass
        self.runners = []

    def shutdown(self):
        self._kill_runners()
        if self._owns_pool:
            self.pool.shutdown(stop_service=True)

    def close(self):
        self.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


def _plain(p):
    """SamplingParams -> a dict that pickles without the generate room on the other side."""
    if p is None or isinstance(p, dict):
        return p
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}


def _rid(request_ids, i):
    return str(i) if request_ids is None else request_ids[i]
