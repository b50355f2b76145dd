"""Input shards, atomic output writes and the resume manifest of a batch job.

Role in the data flow: the runner asks `plan_shards` which units of work exist
(an input file, or a row range of one when `job.shard_rows` is set), writes each
unit's output with `atomic_write` (tmp file + fsync + rename + directory fsync,
so a crash never leaves a partial output under its final name), and records it
in the `Manifest` only after the rename. On a re-run, a shard counts as done only
if the manifest says so AND its output file exists with the recorded size, so no
row is lost or written twice.
"""
import glob
import hashlib
import json
import os
import shutil
from dataclasses import dataclass

from ...errors import ConfigError, InvalidArgument
from ...fsutil import atomic_write

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Shard:
    name: str          # output stem, unique in the job
    path: str          # input file
    start: int         # first row (inclusive)
    stop: int          # last row (exclusive)

    @property
    def rows(self):
        return self.stop - self.start


def discover_inputs(spec, exts, log=None, hint=None):
    """A file, a directory (its files with one of `exts`, sorted) or a glob -> sorted list of files.
    Only regular files count (a FIFO would hang the reader): others are skipped and reported via log."""
    if os.path.isdir(spec):
        found = [os.path.join(spec, n) for n in sorted(os.listdir(spec)) if n.endswith(exts)]
    elif any(ch in spec for ch in "*?["):
        found = sorted(glob.glob(spec))
    elif os.path.exists(spec):
        if not os.path.isfile(spec):
            raise ConfigError(f"job.input: {spec}: not a regular file")
        found = [spec]
    else:
        raise ConfigError(f"job.input: {spec}: no such file or directory")
    paths = [p for p in found if os.path.isfile(p)]
    for p in sorted(set(found) - set(paths)):
        if log is not None:
            log(f"skipping input {p}: not a regular file")
    if not paths:
        raise ConfigError(f"job.input: {spec}: no input files ending in {' or '.join(exts)}"
                          + (f" ({hint})" if hint else ""))
    return paths


def refuse_overlap(out_dir, paths, model=None):
    """An output dir that is, or holds, an input file or the model is refused (the shard outputs,
    manifest.json and report.* are written into it, and `<input stem>.jsonl` can be the input itself)."""
    out = os.path.realpath(out_dir)
    named = [("input", p) for p in paths] + ([("model", model)] if model else [])
    for what, path in named:
        real = os.path.realpath(path)
        if real == out or real.startswith(out.rstrip(os.sep) + os.sep):
            flag = "model" if what == "model" else "job.input"
            raise InvalidArgument(f"--out {out_dir} holds the {what} {path}: the job's outputs would be written "
                                  f"beside it and could overwrite it; pick an output directory outside the "
                                  f"inputs' and the model's (or move the {flag} elsewhere)")


def plan_shards(paths, count_rows, shard_rows=None):
    """Split every input into shards of at most `shard_rows` rows (None = one shard per file)."""
    shards, stems = [], {}
    for path in paths:
        stem = os.path.splitext(os.path.basename(path))[0]
        if stem in stems:
            stem = f"{stem}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"
        stems[stem] = path
        n = count_rows(path)
        step = shard_rows or max(n, 1)
        for i, start in enumerate(range(0, max(n, 1), step)):
            name = stem if shard_rows is None else f"{stem}.part{i:05d}"
            shards.append(Shard(name, path, start, min(start + step, n)))
    return shards


def clean_temp_files(out_dir, keep=()):
    """Remove temp files a killed run left behind (they were never renamed, so never counted);
    `keep`: paths in use by this run (its own offload dir)."""
    keep = {os.path.abspath(k) for k in keep if k}
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if os.path.abspath(path) in keep:
            continue
        if name.startswith(".") and ".tmp-" in name and os.path.isfile(path):
            os.unlink(path)
        elif name.startswith(".offload-") and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)   # a killed run's offload tier


class Manifest:
    """`manifest.json` in the output dir: the job's signature and the shards already written."""

    def __init__(self, out_dir, signature, shard_names):
        self.path = os.path.join(out_dir, MANIFEST)
        self.signature = signature
        self.shard_names = list(shard_names)
        self.done = {}

    @classmethod
    def open(cls, out_dir, signature, shard_names, restart=False):
        manifest = cls(out_dir, signature, shard_names)
        if os.path.exists(manifest.path) and not restart:
            manifest._load_existing(out_dir)
        manifest.save()
        return manifest

    def _load_existing(self, out_dir):
        try:
            with open(self.path) as fh:
                old = json.load(fh)
        except (OSError, ValueError) as exc:
            raise InvalidArgument(f"{self.path}: unreadable resume manifest ({exc}); "
                                  f"use a new --out or pass --restart") from None
        if old.get("signature") != self.signature or old.get("shards") != self.shard_names:
            from .signature import changed_settings
            changed = changed_settings(old.get("signature"), self.signature)
            if changed is None:
                was = (old.get("signature") or {}).get("kind") if isinstance(old.get("signature"), dict) else None
                raise InvalidArgument(f"{out_dir} holds the output of {f'a {was} job' if was else 'another job'} "
                                      f"written under another resume signature format (another job kind, or an "
                                      f"older colibri): its shards cannot be checked against this job, so they are "
                                      f"not resumed; use a new --out, or pass --restart to discard them")
            changed = changed or ["the shard plan (job.shard_rows or the inputs' row counts)"]
            raise InvalidArgument(f"{out_dir} holds the output of a different job: {'; '.join(changed)} changed "
                                  f"since its shards were written (resuming would mix rows of both); restore the "
                                  f"old setting to resume, use a new --out, or pass --restart to discard them")
        for name, info in old.get("done", {}).items():
            out = os.path.join(out_dir, info.get("output", ""))
            if os.path.isfile(out) and os.path.getsize(out) == info.get("bytes"):
                self.done[name] = info

    def is_done(self, name):
        return name in self.done

    def mark_done(self, name, info):
        self.done[name] = info
        self.save()

    def save(self):
        data = {"signature": self.signature, "shards": self.shard_names, "done": self.done,
                "complete": len(self.done) == len(self.shard_names)}
        atomic_write(self.path, [json.dumps(data, indent=1).encode()])
