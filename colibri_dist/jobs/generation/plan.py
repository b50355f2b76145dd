"""What a generate/score job has left to do: inputs -> shards -> resume signature -> manifest -> pending.

Role in the data flow: the runner plans the job here BEFORE it opens the model or starts a pool, so a
resume refused for a changed setting, or a job already finished, costs no model load and no Ray start.
`plan_generation(cfg, out_dir, ...)` -> Plan(paths, shards, manifest, pending, resumed); the partial rows
(partial.py) of the pending shards stay for the run to take, the others (and all on --restart) go.
"""
import os
from dataclasses import dataclass

from . import partial
from .rows import INPUT_EXTS, count_rows
from ..run.shards import MANIFEST, Manifest, clean_temp_files, discover_inputs, plan_shards
from ..run.signature import generation_signature, model_identity


@dataclass
class Plan:
    out_dir: str
    paths: list
    shards: list
    manifest: Manifest
    pending: list
    resumed: bool          # an earlier run of this job wrote here (its report's `runs` carry over)


def kind_settings(job):
    """The job keys that decide how rows are read and sampled (part of the resume signature)."""
    return {"fields": [job.prompt_field, job.messages_field, job.prompt_ids_field, job.sampling_field, job.id_field],
            "sampling_params": dict(job.sampling_params), "seed": job.seed}


def identity_of(path):
    """The model's content identity, or None when there is no container file to read (a test's fake LLM)."""
    return model_identity(path) if path and os.path.isfile(path) else None


def plan_generation(cfg, out_dir, restart=False, model_signature=None, keep=()):
    paths = discover_inputs(cfg.job.input, INPUT_EXTS)
    shards = plan_shards(paths, count_rows, cfg.job.shard_rows)
    os.makedirs(out_dir, exist_ok=True)
    files = [[os.path.abspath(p), os.path.getsize(p), os.stat(p).st_mtime_ns] for p in paths]
    signature = generation_signature(cfg, model_signature, files, kind_settings(cfg.job))
    resumed = not restart and os.path.exists(os.path.join(out_dir, MANIFEST))
    manifest = Manifest.open(out_dir, signature, [s.name for s in shards], restart=restart)
    clean_temp_files(out_dir, keep=keep)
    pending = [s for s in shards if not manifest.is_done(s.name)]
    partial.remove_all(out_dir, keep=() if restart else [s.name for s in pending])
    return Plan(out_dir, paths, shards, manifest, pending, resumed)
