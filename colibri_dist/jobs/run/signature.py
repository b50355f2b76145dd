"""The resume signature of a job, every kind: everything that can change a row's bytes, by name.

Role in the data flow: the runner's plan (run/plan.py) computes `job_signature(cfg, model_identity(model), files,
kind.settings())` before it opens the model or starts a pool, and the Manifest refuses an output dir whose
recorded signature differs, naming each setting that changed (`changed_settings`). Held for every kind: the
container's content identity (a digest of its header, tensor table with every blob's CRC, and metadata, so a
re-converted or replaced model differs whatever its path or mtime), the hot-added expert set (`MODEL.experts/`:
the manifest and every segment's header, which carries the blob CRCs and the bias), routing.policy, job.w8a8,
job.shard_rows and the input files; then the kind's own settings (generate/score: the KV cache dtype, budget
and max_seq_len, the chat-template bounds, the sampling defaults and seed, the row fields read;
token-classification: the row fields and the tokenizer; moe-layer: the layers). Not held: batch_tokens,
max_num_seqs, prefill_chunk, threads, workers, cache and offload settings: they never change a byte
(docs/CONFIG.md). An output dir written under another signature format (a token-classification or
moe-layer dir of colibri before this one, which held the model's path and mtime) is refused as such.
"""
import hashlib
import json
import os

from ...errors import InvalidArgument

SEGMENT_HEAD = 4096          # store/segments.py HEAD: magic, length, JSON header (layout, crc32s, bias)


def model_identity(path):
    """{"container": digest, "bytes": size, "hot_added": digest or None} of a .colibri file."""
    from ...format import spec
    try:
        with open(path, "rb") as fh:
            raw = fh.read(spec.HEADER_SIZE)
            header = spec.unpack_header(raw)
            h = hashlib.sha256(raw)
            for off, n in ((header["table_offset"], header["table_count"] * spec.ENTRY_SIZE),
                           (header["meta_offset"], header["meta_bytes"])):
                fh.seek(off)
                h.update(fh.read(n))
            size = os.fstat(fh.fileno()).st_size
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidArgument(f"model: {path}: cannot read the container's identity ({exc})") from None
    return {"container": h.hexdigest()[:32], "bytes": size, "hot_added": hot_added_digest(path)}


def hot_added_digest(model_path):
    """Digest of the committed hot-add state beside the model (None if there is none)."""
    from ...store.segments import MANIFEST, segments_dir
    root = segments_dir(model_path)
    manifest = os.path.join(root, MANIFEST)
    if not os.path.isfile(manifest):
        return None
    with open(manifest, "rb") as fh:
        text = fh.read()
    h = hashlib.sha256(text)
    try:
        listed = sorted({item["file"] for rec in json.loads(text).get("layers", {}).values()
                         for item in rec.get("added", [])})
    except (ValueError, AttributeError, TypeError, KeyError):
        listed = []                                   # the loader names a damaged manifest itself
    for name in listed:
        h.update(name.encode() + b"\0")
        try:
            with open(os.path.join(root, name), "rb") as fh:
                h.update(fh.read(SEGMENT_HEAD))
                h.update(str(os.fstat(fh.fileno()).st_size).encode())
        except OSError:
            h.update(b"missing")
    return h.hexdigest()[:32]


def job_signature(cfg, model, inputs, settings):
    """The flat {setting: value} an output dir is written under: the settings every kind shares, then the
    kind's own (`settings`, named as the config names them). model: model_identity(...) or None."""
    j, model = cfg.job, model or {}
    return {"kind": j.kind, "model.container": model.get("container"), "model.bytes": model.get("bytes"),
            "model.hot_added_experts": model.get("hot_added"), "routing.policy": cfg.routing.policy,
            "job.w8a8": bool(j.w8a8), "job.shard_rows": j.shard_rows, "job.input": inputs,
            **settings}


HINTS = {"model.container": "the model file is a different container (re-converted or replaced)",
         "model.hot_added_experts": "experts were hot-added or removed (`colibri experts add|remove`)",
         "job.input": "the input files changed (names, sizes or mtimes)"}


def changed_settings(old, new):
    """Names of the settings whose recorded value differs; None when the old signature has another shape
    (another job kind, or an older colibri's format: nothing can be compared)."""
    if not isinstance(old, dict) or set(old) != set(new):
        return None
    return [HINTS.get(k, k) for k in new if old[k] != new[k]]
