"""Ray Data batch inference with colibri: a processor over `ds.map_batches` (ray.data.llm's shape).

Role in the data flow (the Ray side; colibri_dist/ray_data.py is the public entry point):
    ds -> [preprocess: ds.map] -> ds.map_batches(ColibriPredictor, actor pool of `concurrency`,
    batch_format="pyarrow") -> [postprocess: ds.map] -> ds
Each actor takes a NUMA slot from a small counter actor, pins itself with the numa room's plan
(pool/worker.py's _numa_pin: one slot per core group, round-robin over the nodes; pinning decides
speed, never results), then opens ONE runner (`runner_factory(config, threads)`, e.g. an LLM) and
sends it every batch as a list of row dicts. Input columns are carried over unchanged; the runner's
output columns are added (replacing input columns of the same name) with fixed Arrow types, so
batches with only bad rows still have the same schema. Needs pyarrow (Ray Data does too): the
`colibri-dist[data]` extra.
"""
import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import ray
import ray.data

from ..errors import InvalidArgument


@dataclass
class ColibriProcessorConfig:
    """What build_processor needs; names follow ray.data.llm's processor configs where they exist."""
    model_source: str                       # .colibri whole model
    kind: str = "generate"                  # generate | score
    sampling_params: dict = field(default_factory=dict)     # defaults under each row's `sampling_params`
    seed: int = 0                           # rows without a seed: derived from this and the row's id
    batch_size: int = 64                    # rows per map_batches call (the LLM batches them continuously)
    concurrency: int = 1                    # actors, one LLM each
    num_cpus: Optional[float] = None        # Ray CPUs reserved per actor (default 1)
    threads: Optional[int] = None           # native threads per LLM (default: the actor's NUMA cpus)
    numa: dict = field(default_factory=lambda: {"enabled": True, "workers_per_node": 1, "mem_policy": "bind"})
    engine_kwargs: dict = field(default_factory=dict)       # LLM(...) keywords: max_num_seqs, kv_cache_bytes, ...
    ray_address: Optional[str] = None       # None: a local Ray on loopback unless one is connected

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InvalidArgument(f"ColibriProcessorConfig.kind: expected generate | score, got {self.kind!r}")
        for name in ("batch_size", "concurrency"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"ColibriProcessorConfig.{name}: expected an integer >= 1, got {value!r}")


def _types():
    import pyarrow as pa
    top = pa.list_(pa.list_(pa.float64()))
    logprob = pa.struct([("token_id", pa.int64()), ("logprob", pa.float64()), ("rank", pa.int64()), ("top", top)])
    return {"generate": {"generated_text": pa.string(), "generated_tokens": pa.list_(pa.int64()),
                         "num_input_tokens": pa.int64(), "num_generated_tokens": pa.int64(),
                         "finish_reason": pa.string(), "logprobs": pa.list_(logprob), "error": pa.string()},
            "score": {"prompt_logprobs": pa.list_(pa.float64()), "total_logprob": pa.float64(),
                      "num_tokens": pa.int64(), "error": pa.string()}}


KINDS = ("generate", "score")


@ray.remote(num_cpus=0)
class _Slots:
    """Hands out 0, 1, 2, ... to the actors of one processor (their NUMA slot)."""

    def __init__(self):
        self.n = 0

    def next(self):
        self.n += 1
        return self.n - 1


class ColibriPredictor:
    """The map_batches callable class: one runner (LLM) per actor, NUMA-pinned at start."""

    def __init__(self, config, runner_factory, slots=None):
        from .worker import _numa_pin
        self.config = config
        self.slot = ray.get(slots.next.remote()) if slots is not None else 0
        self.numa_report, cpus = _numa_pin(self.slot, config.concurrency, config.numa)
        self.runner = runner_factory(config, config.threads or (len(cpus) if cpus else None))
        self.types = _types()[config.kind]

    def __call__(self, table):
        import pyarrow as pa
        out = self.runner.run([_plain(r) for r in table.to_pylist()])
        for name, typ in self.types.items():
            column = pa.array([row.get(name) for row in out], type=typ)
            if name in table.column_names:
                table = table.set_column(table.column_names.index(name), name, column)
            else:
                table = table.append_column(name, column)
        return table                        # `id` and every other input column: as they came in


def _plain(row):
    """A row from Arrow as the job reader sees a JSON row: struct fields that are None dropped from
    `sampling_params` (Arrow fills the keys other rows set)."""
    sp = row.get("sampling_params")
    if isinstance(sp, dict):
        row = dict(row, sampling_params={k: v for k, v in sp.items() if v is not None})
    return row


class Processor:
    """processor(ds) -> ds with the output columns (ray.data.llm's Processor shape)."""

    def __init__(self, config, runner_factory, preprocess=None, postprocess=None, preprocess_map_kwargs=None,
                 postprocess_map_kwargs=None):
        self.config, self.runner_factory = config, runner_factory
        self.preprocess, self.postprocess = preprocess, postprocess
        # the row lambdas reserve no CPU by default: the actors may hold every CPU of a small machine, and a
        # postprocess task waiting for one would wait for the actor pool to be torn down (or forever)
        self.pre_kwargs = {"num_cpus": 0, **(preprocess_map_kwargs or {})}
        self.post_kwargs = {"num_cpus": 0, **(postprocess_map_kwargs or {})}

    def __call__(self, ds):
        from .ray_setup import connect
        connect(self.config.ray_address)
        c = self.config
        if self.preprocess is not None:
            ds = ds.map(self.preprocess, **self.pre_kwargs)
        slots = _Slots.remote()
        ds = ds.map_batches(ColibriPredictor, fn_constructor_kwargs={"config": c, "runner_factory": self.runner_factory,
                                                                     "slots": slots},
                            batch_size=c.batch_size, batch_format="pyarrow",
                            compute=ray.data.ActorPoolStrategy(size=c.concurrency),
                            num_cpus=1 if c.num_cpus is None else c.num_cpus)
        if self.postprocess is not None:
            ds = ds.map(self.postprocess, **self.post_kwargs)
        return ds


def build_processor(config, runner_factory, preprocess=None, postprocess=None, preprocess_map_kwargs=None,
                    postprocess_map_kwargs=None):
    """A Processor for `config` whose actors run `runner_factory(config, threads)` (see colibri_dist.ray_data)."""
    if not isinstance(config, ColibriProcessorConfig):
        raise InvalidArgument(f"build_processor: expected a ColibriProcessorConfig, got {type(config).__name__}")
    return Processor(dataclasses.replace(config), runner_factory, preprocess, postprocess, preprocess_map_kwargs,
                     postprocess_map_kwargs)
