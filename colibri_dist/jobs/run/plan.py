"""What a job has left to do, every kind: inputs -> shards -> resume signature -> manifest -> pending.

Role in the data flow: the runner plans the job here BEFORE it opens the engine or starts a pool, so a
resume refused for a changed setting, or a job already finished, costs no model load and no Ray start.
`plan_job(cfg, kind, paths, out_dir, restart)` -> Plan(paths, shards, manifest, pending, resumed); the
partial rows (partial.py) of the pending shards stay for the run to take, the others (and all on --restart) go.
"""
import os
from dataclasses import dataclass

from . import partial
from .shards import MANIFEST, Manifest, plan_shards
from .signature import job_signature, model_identity


@dataclass
class Plan:
    out_dir: str
    paths: list
    shards: list
    manifest: Manifest
    pending: list
    resumed: bool          # an earlier run of this job wrote here (its report's `runs` carry over)


def identity_of(path):
    """The model's content identity, or None when there is no container file to read (a test's fake LLM)."""
    return model_identity(path) if path and os.path.isfile(path) else None


def plan_job(cfg, kind, paths, out_dir, restart=False):
    """kind: count_rows(path) and settings() (its part of the resume signature)."""
    shards = plan_shards(paths, kind.count_rows, cfg.job.shard_rows)
    files = [[os.path.abspath(p), os.path.getsize(p), os.stat(p).st_mtime_ns] for p in paths]
    signature = job_signature(cfg, identity_of(cfg.model), files, kind.settings())
    resumed = not restart and os.path.exists(os.path.join(out_dir, MANIFEST))
    manifest = Manifest.open(out_dir, signature, [s.name for s in shards], restart=restart)
    pending = [s for s in shards if not manifest.is_done(s.name)]
    partial.remove_all(out_dir, keep=() if restart else [s.name for s in pending])
    return Plan(out_dir, paths, shards, manifest, pending, resumed)
