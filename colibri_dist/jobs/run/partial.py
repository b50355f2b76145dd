"""Rows a job finished inside shards not yet written, kept so an interrupted run loses seconds, not shards.

Role in the data flow: a shard's output is written whole, atomically, once every row of its group is
done (run/shards.py), so a Ctrl-C or kill would lose every finished row of the shards in flight. The
runner opens PartialRows for a kind that keeps them (`partial_rows`: generate, whose rows finish one by
one) and the plan (run/plan.py) drops the files of shards already written. While a group runs, each row
is appended here as it finishes, to `.<shard>.jsonl.partial` in the output dir: a first line naming the
job's signature digest, then one {"index": row index in its file, "line": the output row's exact JSON
text, "numerical": bool} per row; flushed per row, fsynced at most every FSYNC_S seconds and when the run
stops. A resume (the manifest refused any other job already; a different digest is ignored) gives the
rows found here to the job kind, which runs only the others and writes the shard with both in input
order; the file goes once its shard is written, and on --restart. Rows are batch-invariant and seeded by
their id, so the shard's bytes equal an uninterrupted run's.
"""
import hashlib
import json
import os
import time

SUFFIX = ".jsonl.partial"
FSYNC_S = 2.0


def signature_digest(signature):
    return hashlib.sha256(json.dumps(signature, sort_keys=True, default=str).encode()).hexdigest()[:32]


class PartialRows:
    """The partial files of one output dir under one job signature."""

    def __init__(self, out_dir, signature, clock=time.monotonic):
        self.out_dir, self.digest, self.clock = out_dir, signature_digest(signature), clock
        self.files, self.synced = {}, clock()

    def path(self, shard_name):
        return os.path.join(self.out_dir, f".{shard_name}{SUFFIX}")

    def _header(self, shard_name):
        try:
            with open(self.path(shard_name), encoding="utf-8") as fh:
                return _json(fh.readline()).get("signature")
        except OSError:
            return None

    def load(self, shard_name):
        """{row index: (output line, numerical)} kept for this shard ({} when none or another job's)."""
        try:
            with open(self.path(shard_name), encoding="utf-8") as fh:
                lines = fh.read().split("\n")
        except OSError:
            return {}
        if not lines or _json(lines[0]).get("signature") != self.digest:
            return {}
        kept = {}
        for text in lines[1:]:
            entry = _json(text)             # a line cut by a kill is not JSON: that row runs again
            if isinstance(entry.get("index"), int) and isinstance(entry.get("line"), str):
                kept[entry["index"]] = (entry["line"], bool(entry.get("numerical")))
        return kept

    def add(self, shard_name, index, line, numerical=False):
        fh = self.files.get(shard_name)
        if fh is None:                      # another job's file (its header differs) is started afresh
            ours = self._header(shard_name) == self.digest
            fh = self.files[shard_name] = open(self.path(shard_name), "a" if ours else "w", encoding="utf-8")
            if not ours:
                fh.write(json.dumps({"signature": self.digest}) + "\n")
        fh.write(json.dumps({"index": index, "line": line, "numerical": numerical}) + "\n")
        fh.flush()
        if self.clock() - self.synced >= FSYNC_S:
            self.sync()

    def sync(self):
        for fh in self.files.values():
            fh.flush()
            os.fsync(fh.fileno())
        self.synced = self.clock()

    def drop(self, shard_name):
        """The shard is written: its partial file goes."""
        fh = self.files.pop(shard_name, None)
        if fh is not None:
            fh.close()
        try:
            os.unlink(self.path(shard_name))
        except FileNotFoundError:
            pass

    def close(self):
        self.sync()
        for fh in self.files.values():
            fh.close()
        self.files = {}


def kept_count(out_dir):
    """Rows kept in the partial files of an output dir (what a resume will not run again)."""
    n = 0
    for name in os.listdir(out_dir) if os.path.isdir(out_dir) else ():
        if name.startswith(".") and name.endswith(SUFFIX):
            with open(os.path.join(out_dir, name), encoding="utf-8", errors="replace") as fh:
                n += max(0, sum(1 for line in fh if line.startswith('{"index"')))
    return n


def remove_all(out_dir, keep=()):
    """Drop every partial file but those of the shards in `keep` (a --restart, or shards already written)."""
    keep = {f".{name}{SUFFIX}" for name in keep}
    for name in os.listdir(out_dir):
        if name.startswith(".") and name.endswith(SUFFIX) and name not in keep:
            os.unlink(os.path.join(out_dir, name))


def _json(text):
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
