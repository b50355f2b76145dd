"""Batches of row dicts through one LLM, with the columns of the generate/score jobs (the Ray Data path).

Role in the data flow: colibri_dist.ray_data wires `open_processor` into the Ray Data actors of
pool/ray_data.py; each actor opens one BatchProcessor (one cd.LLM through front.open_llm; engine_kwargs are EngineArgs fields, as vLLM's) and hands it the
rows of every batch: `processor.run(rows) -> output dicts`. Input and output columns are exactly those of
the jobs (rows.py / job.py): `prompt` | `messages` | `prompt_token_ids`, optional `id`
and `sampling_params`; out `generated_text`, `generated_tokens`, `num_input_tokens`,
`num_generated_tokens`, `finish_reason` (+ `logprobs`), or `prompt_logprobs`, `total_logprob`,
`num_tokens` for score, or `error` for a bad row.
"""
from types import SimpleNamespace

from ...config import JobSection, parse_section
from .job import KINDS


class BatchProcessor:
    def __init__(self, model, kind="generate", sampling_params=None, seed=0, threads=None, engine_kwargs=None):
        from ...config.engine_args import EngineArgs
        from ...front import open_llm
        job = parse_section(JobSection, {"kind": kind, "sampling_params": dict(sampling_params or {}),
                                         "seed": seed}, source="ray_data config")
        self.llm = open_llm(EngineArgs(model=model, threads=threads, seed=seed, **dict(engine_kwargs or {})))
        try:
            self.kind = KINDS[kind](SimpleNamespace(job=job), self.llm)
        except BaseException:
            self.llm.close()
            raise

    def run(self, rows):
        return self.kind.run_objects(rows)

    def close(self):
        self.llm.close()


def open_processor(config, threads=None):
    """The factory the Ray Data actors call (a module-level function: pickled by reference)."""
    return BatchProcessor(config.model_source, kind=config.kind, sampling_params=config.sampling_params,
                       seed=config.seed, threads=threads or config.threads, engine_kwargs=config.engine_kwargs)
