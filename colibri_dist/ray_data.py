"""Ray Data batch inference with colibri-dist, in ray.data.llm's build_processor shape.

    import ray                  # in your code (colibri_dist imports ray only inside pool/)
    from colibri_dist.ray_data import ColibriProcessorConfig, build_processor
    config = ColibriProcessorConfig(model_source="model.colibri", concurrency=2, batch_size=32,
                                    sampling_params={"max_tokens": 16})
    processor = build_processor(config,
                                preprocess=lambda row: {"prompt": row["question"]},
                                postprocess=lambda row: {"answer": row["generated_text"], **row})
    ds = processor(ray.data.from_items([{"question": "count: one two"}]))

An actor pool of `concurrency` actors, one cd.LLM each (its MoE layers on its own in-process MoeExecutor),
NUMA-pinned from the numa room's plan. Rows take and give the columns of the `generate` / `score`
jobs (docs/CONFIG.md); every input column is carried over. Needs the `[data]` extra (pyarrow, pandas:
what Ray Data itself imports).

Role: a thin re-export. The Ray side lives in pool/ray_data.py (the only room that imports ray);
the rows -> LLM -> columns side in jobs/generation/batch.py; this module joins the two.
"""
from .jobs.generation.batch import BatchProcessor, open_processor
from .pool.ray_data import ColibriPredictor, ColibriProcessorConfig, Processor
from .pool.ray_data import build_processor as _build

__all__ = ["BatchProcessor", "ColibriPredictor", "ColibriProcessorConfig", "Processor", "build_processor"]


def build_processor(config, preprocess=None, postprocess=None, preprocess_map_kwargs=None,
                    postprocess_map_kwargs=None, processor_factory=open_processor):
    """processor(ds) -> ds: preprocess, the colibri actors, postprocess (each a ds.map_batches over batch_size rows).
    *_map_kwargs go to those stages (ray.data map_batches keywords; default num_cpus=0 and at most as
    many tasks at once as actors: the row functions never wait for a CPU the actors hold)."""
    return _build(config, processor_factory, preprocess=preprocess, postprocess=postprocess,
                  preprocess_map_kwargs=preprocess_map_kwargs, postprocess_map_kwargs=postprocess_map_kwargs)
