"""Ray Data batch inference with colibri: a processor over `ds.map_batches` (ray.data.llm's shape).

Role in the data flow (the Ray side; colibri_dist/ray_data.py is the public entry point):
    ds -> [preprocess] -> ds.map_batches(ColibriPredictor, actor pool of `concurrency` (n or (min, max)),
    batch_format="pyarrow") -> [postprocess] -> ds
The row functions run as map_batches tasks over `batch_size` rows (Ray Data bundles small blocks into
one task, so 40 one-row blocks do not start 40 worker processes), at most as many at once as there
are actors, on their own resources (*_map_kwargs; default num_cpus=0). If the actors, one task of
each row function and of each stage feeding them (a read_json task) do not fit the cluster's CPUs (a
pipeline that would wait forever), the actors' default reservation shrinks to fit, and an explicit
num_cpus that cannot fit is an InvalidArgument (ray_data_cpus.py).
A row the processor fails raises by default (ray.data.llm's should_continue_on_error=False); with
should_continue_on_error=True it gets an `error` column and the pipeline goes on.
Each actor takes a NUMA slot from a small counter actor, pins itself with the numa room's plan
(pool/worker.py's _numa_pin: one slot per core group, round-robin over the nodes; pinning decides
speed, never results), then opens ONE batch processor (`processor_factory(config, threads)`, e.g. an LLM) and
sends it every batch as a list of row dicts. Input columns are carried over unchanged; the processor's
output columns are added (replacing input columns of the same name) with fixed Arrow types, so
batches with only bad rows still have the same schema. Needs pyarrow (Ray Data does too): the
`colibri-dist[data]` extra.
"""
import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

import ray
import ray.data

from ..errors import InvalidArgument
from .ray_data_cpus import actor_cpus, upstream_cpus


@dataclass
class ColibriProcessorConfig:
    """What build_processor needs; names follow ray.data.llm's processor configs where they exist."""
    model_source: str                       # .colibri whole model
    kind: str = "generate"                  # generate | score
    sampling_params: dict = field(default_factory=dict)     # defaults under each row's `sampling_params`
    seed: int = 0                           # rows without a seed: derived from this and the row's id
    batch_size: int = 64                    # rows per map_batches call (the LLM batches them continuously)
    concurrency: Union[int, Tuple[int, int]] = 1    # actors, one LLM each: n, or an autoscaling (min, max)
    num_cpus: Optional[float] = None        # Ray CPUs reserved per actor (default 1)
    threads: Optional[int] = None           # native threads per LLM (default: the actor's NUMA cpus)
    numa: dict = field(default_factory=lambda: {"enabled": True, "workers_per_node": 1, "mem_policy": "bind"})
    engine_kwargs: dict = field(default_factory=dict)       # LLM(...) keywords: max_num_seqs, kv_cache_bytes, ...
    ray_address: Optional[str] = None       # None: a local Ray on loopback unless one is connected
    should_continue_on_error: bool = False  # False: a failed row raises; True: it gets an `error` column

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InvalidArgument(f"ColibriProcessorConfig.kind: expected generate | score, got {self.kind!r}")
        if not _positive_int(self.batch_size):
            raise InvalidArgument(f"ColibriProcessorConfig.batch_size: expected an integer >= 1, "
                                  f"got {self.batch_size!r}")
        self.concurrency = _concurrency(self.concurrency)
        if not isinstance(self.should_continue_on_error, bool):
            raise InvalidArgument(f"ColibriProcessorConfig.should_continue_on_error: expected True or False, "
                                  f"got {self.should_continue_on_error!r}")
        c = self.num_cpus
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or c < 0):
            raise InvalidArgument(f"ColibriProcessorConfig.num_cpus: expected a number >= 0 or None, got {c!r}")

    @property
    def max_actors(self):
        return self.concurrency if isinstance(self.concurrency, int) else self.concurrency[1]


def _positive_int(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _concurrency(value):
    """An int n >= 1, or (min, max) with 1 <= min <= max (ray.data.llm's rule) -> int or tuple."""
    if _positive_int(value):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(_positive_int(v) for v in value) \
            and value[0] <= value[1]:
        return tuple(value)
    raise InvalidArgument(f"ColibriProcessorConfig.concurrency: expected an integer >= 1 or a (min, max) pair "
                          f"with 1 <= min <= max, got {value!r}")


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
    """The map_batches callable class: one batch processor (an LLM) per actor, NUMA-pinned at start."""

    def __init__(self, config, processor_factory, slots=None):
        from .worker import _numa_pin
        self.config = config
        self.slot = ray.get(slots.next.remote()) if slots is not None else 0
        self.numa_report, cpus = _numa_pin(self.slot, config.max_actors, config.numa)
        self.processor = processor_factory(config, config.threads or (len(cpus) if cpus else None))
        self.types = _types()[config.kind]

    def __call__(self, table):
        import pyarrow as pa
        out = self.processor.run([_plain(r) for r in table.to_pylist()])
        if not self.config.should_continue_on_error:
            bad = next(((i, r) for i, r in enumerate(out) if r.get("error")), None)
            if bad is not None:
                i, row = bad
                name = f"row {row['id']!r}" if row.get("id") is not None else f"row {i} of a batch"
                raise InvalidArgument(f"{name}: {row['error']} (ColibriProcessorConfig("
                                      f"should_continue_on_error=True) keeps going with an `error` column)")
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


class RowFn:
    """A row function (preprocess / postprocess) applied to every row of a pyarrow batch."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, table):
        import pyarrow as pa
        rows = [self.fn(r) for r in table.to_pylist()]
        names = list(dict.fromkeys(k for r in rows for k in r))        # every key any row gave, in order
        return pa.table({k: [r.get(k) for r in rows] for k in names})


class Processor:
    """processor(ds) -> ds with the output columns (ray.data.llm's Processor shape)."""

    def __init__(self, config, processor_factory, preprocess=None, postprocess=None, preprocess_map_kwargs=None,
                 postprocess_map_kwargs=None):
        self.config, self.processor_factory = config, processor_factory
        self.preprocess, self.postprocess = preprocess, postprocess
        # the row functions reserve no CPU by default: the actors may hold every CPU of a small machine
        self.pre_kwargs = {"num_cpus": 0, **(preprocess_map_kwargs or {})}
        self.post_kwargs = {"num_cpus": 0, **(postprocess_map_kwargs or {})}

    def _row_stage(self, ds, fn, kwargs):
        kw = dict(kwargs)
        if "compute" not in kw and "concurrency" not in kw:
            kw["compute"] = ray.data.TaskPoolStrategy(size=self.config.max_actors)
        return ds.map_batches(RowFn(fn), batch_size=self.config.batch_size, batch_format="pyarrow", **kw)

    def actor_cpus(self, ds=None):
        """CPUs each actor reserves: num_cpus, or 1 shrunk so that the actors, one task of each row
        function and the stages feeding `ds` (a read_json task) fit the cluster (ray_data_cpus.py)."""
        row_cpus = sum(float(kw.get("num_cpus") or 0) for fn, kw in ((self.preprocess, self.pre_kwargs),
                                                                     (self.postprocess, self.post_kwargs)) if fn)
        upstream = upstream_cpus(ds) if ds is not None else 0.0
        return actor_cpus(self.config, row_cpus, upstream, float(ray.cluster_resources().get("CPU", 0)))

    def __call__(self, ds):
        from .ray_setup import connect
        connect(self.config.ray_address)
        c = self.config
        cpus = self.actor_cpus(ds)          # from the stages before ours, so before ours are added
        if self.preprocess is not None:
            ds = self._row_stage(ds, self.preprocess, self.pre_kwargs)
        slots = _Slots.remote()
        pool = ray.data.ActorPoolStrategy(size=c.concurrency) if isinstance(c.concurrency, int) else \
            ray.data.ActorPoolStrategy(min_size=c.concurrency[0], max_size=c.concurrency[1])
        ds = ds.map_batches(ColibriPredictor, fn_constructor_kwargs={
            "config": c, "processor_factory": self.processor_factory, "slots": slots},
                            batch_size=c.batch_size, batch_format="pyarrow", compute=pool, num_cpus=cpus)
        if self.postprocess is not None:
            ds = self._row_stage(ds, self.postprocess, self.post_kwargs)
        return ds


def build_processor(config, processor_factory, preprocess=None, postprocess=None, preprocess_map_kwargs=None,
                    postprocess_map_kwargs=None):
    """A Processor for `config` whose actors run `processor_factory(config, threads)` (see colibri_dist.ray_data)."""
    if not isinstance(config, ColibriProcessorConfig):
        raise InvalidArgument(f"build_processor: expected a ColibriProcessorConfig, got {type(config).__name__}")
    return Processor(dataclasses.replace(config), processor_factory, preprocess, postprocess, preprocess_map_kwargs,
                     postprocess_map_kwargs)
