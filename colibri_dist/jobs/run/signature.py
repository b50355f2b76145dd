"""The resume signature of a generate/score job: everything that can change a row's bytes, by name.

Role in the data flow: the runner computes `generation_signature(cfg, model_identity(cfg.model))` before it
opens the model or starts a pool, and the Manifest refuses an output dir whose recorded signature differs,
naming each setting that changed (`changed_settings`). Held: the container's content identity (a digest of
its header, tensor table with every blob's CRC, and metadata, so a re-converted or replaced model differs
whatever its path or mtime), the hot-added expert set (`MODEL.experts/`: the manifest and every segment's
header, which carries the blob CRCs and the bias), routing.policy, job.w8a8, the KV cache dtype, budget and
max_seq_len (they decide where a long generation stops), the chat-template bounds (an overrun is a row
error), the sampling defaults and seed, and the row fields
read. Not held: batch_tokens, max_num_seqs, prefill_chunk, threads, workers, cache and offload settings:
they never change a byte (docs/CONFIG.md).
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


def generation_signature(cfg, model, inputs, kind_settings):
    """The flat {setting: value} a generate/score output dir was written under."""
    j = cfg.job
    return {"kind": j.kind, "model.container": (model or {}).get("container"),
            "model.bytes": (model or {}).get("bytes"), "model.hot_added_experts": (model or {}).get("hot_added"),
            "routing.policy": cfg.routing.policy, "job.w8a8": bool(getattr(j, "w8a8", True)),
            "job.kv_cache_dtype": getattr(j, "kv_cache_dtype", "f32"),
            "job.kv_cache_bytes": getattr(j, "kv_cache_bytes", None), "job.max_seq_len": getattr(j, "max_seq_len", None),
            "job.sampling_params": kind_settings["sampling_params"], "job.seed": kind_settings["seed"],
            "job.chat_template_timeout_s": getattr(j, "chat_template_timeout_s", None),
            "job.chat_template_max_chars": getattr(j, "chat_template_max_chars", None),
            "job (row fields)": kind_settings["fields"], "job.shard_rows": j.shard_rows, "job.input": inputs}


HINTS = {"model.container": "the model file is a different container (re-converted or replaced)",
         "model.hot_added_experts": "experts were hot-added or removed (`colibri experts add|remove`)",
         "job.input": "the input files changed (names, sizes or mtimes)"}


def changed_settings(old, new):
    """Names of the settings whose recorded value differs (old signatures of another shape: 'signature')."""
    if not isinstance(old, dict) or set(old) != set(new):
        return ["the signature format (an output dir of an older colibri or another job kind)"]
    return [HINTS.get(k, k) for k in new if old[k] != new[k]]
