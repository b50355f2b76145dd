"""Job kind `token-classification`: JSONL token ids (or text) in, per-token class probabilities JSONL out.

Role in the data flow: a MoeKind (moe_kind.py: the container opened, the MoE executor for the layers);
for each shard the runner calls `run_shard`; rows are
parsed (token ids from `job.ids_field`, or `job.text_field` tokenized with the
model's own tokenizer.json), flattened into batches of `job.batch_tokens`
tokens, run through embeddings -> MoE layers (on the executor, with RMSNorm and
residual here) -> class head, and written as one JSONL line per input row:
    {"id": ..., "pred": [class per token], "probs": [[p per class] per token]}
Tokens are independent in this model (no attention), so batches may split rows.
"""
import json
import math
import os

import numpy as np

from ..errors import ConfigError, FormatError, InvalidArgument
from .classifier_head import ClassifierHead, rms_norm_eps, rmsnorm
from ..fsutil import atomic_write
from ..generate.safe_text import safe_encode, tokenizer_call
from .moe_kind import MoeKind


class TokenClassification(MoeKind):
    input_exts = (".jsonl",)

    def __init__(self, cfg, model, model_path, tokenizer_path=None):
        self.job = cfg.job
        self.model, self.path = model, model_path
        eps = rms_norm_eps(model)
        self.head = ClassifierHead(model, model_path, eps)
        self.tokenizer_path = tokenizer_path
        self._tokenizer = None

    @classmethod
    def of(cls, cfg, model, model_path):
        return cls(cfg, model, model_path, find_tokenizer(cfg.job, model_path, model))

    def settings(self):
        """Its part of the resume signature (run/signature.py)."""
        j = self.job
        return {"job.input_format": j.input_format, "job.ids_field": j.ids_field, "job.text_field": j.text_field,
                "job.id_field": j.id_field, "job.tokenizer": self.tokenizer_path}

    def output_name(self, shard):
        return f"{shard.name}.jsonl"

    def n_experts_by_layer(self):
        return {l: self.model.config.n_experts for l in self.model.moe_layers}

    # ------------------------------------------------------------ reading

    def count_rows(self, path):
        with open(path, "rb") as fh:
            return sum(1 for line in fh if line.strip())

    def read_rows(self, shard):
        """-> list of (row_id, ids int64[n], labels int64[n] | None) for the shard's row range."""
        rows, index = [], -1
        with open(shard.path, "rb") as fh:
            for line_no, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise FormatError(f"{shard.path}:{line_no}: not UTF-8 (byte {exc.start})") from None
                index += 1
                if index < shard.start:
                    continue
                if index >= shard.stop:
                    break
                rows.append(self._parse_row(line, f"{shard.path}:{line_no}", index))
        return rows

    def count_tokens(self, shard):
        return sum(len(ids) for _, ids, _ in self.read_rows(shard))

    def _parse_row(self, line, where, index):
        try:
            obj = json.loads(line)
        except RecursionError:
            raise FormatError(f"{where}: JSON nested too deeply") from None
        except ValueError as exc:
            raise FormatError(f"{where}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise FormatError(f"{where}: expected a JSON object per line, got {type(obj).__name__}")
        ids = self._ids_of(obj, where)
        labels = obj.get("labels")
        if labels is not None and (not isinstance(labels, list) or len(labels) != len(ids)
                                   or not all(_is_int(v) and 0 <= v < 2 ** 63 for v in labels)):
            raise FormatError(f"{where}: 'labels' must be a list as long as the tokens ({len(ids)}) of class indices")
        row_id = obj.get(self.job.id_field, index)
        if not (row_id is None or isinstance(row_id, str) or _is_int(row_id)
                or (isinstance(row_id, float) and math.isfinite(row_id))):
            raise FormatError(f"{where}: '{self.job.id_field}' must be a string, an integer or a finite number, "
                              f"got {str(row_id)[:40]}")
        return row_id, ids, (np.asarray(labels, dtype=np.int64) if labels is not None else None)

    def _ids_of(self, obj, where):
        fmt, j = self.job.input_format, self.job
        if fmt in ("auto", "ids") and j.ids_field in obj:
            ids = obj[j.ids_field]
            if not isinstance(ids, list) or not all(_is_int(t) for t in ids):
                raise FormatError(f"{where}: '{j.ids_field}' must be a list of integer token ids")
            big = next((t for t in ids if not 0 <= t < self.head.vocab_size), None)
            if big is not None:        # before int64 conversion: 10**30 must not overflow
                raise FormatError(f"{where}: token id {big} out of range for vocab size {self.head.vocab_size}")
            arr = np.asarray(ids, dtype=np.int64)
        elif fmt in ("auto", "text") and j.text_field in obj:
            if not isinstance(obj[j.text_field], str):
                raise FormatError(f"{where}: '{j.text_field}' must be a string")
            arr = np.asarray(safe_encode(self.tokenizer(), obj[j.text_field], where, error=FormatError), dtype=np.int64)
        else:
            wanted = {"auto": f"'{j.ids_field}' or '{j.text_field}'", "ids": f"'{j.ids_field}'",
                      "text": f"'{j.text_field}'"}[fmt]
            raise FormatError(f"{where}: row has no {wanted} field")
        bad = (arr < 0) | (arr >= self.head.vocab_size)
        if bad.any():
            raise FormatError(f"{where}: token id {int(arr[bad][0])} out of range for vocab size "
                              f"{self.head.vocab_size}")
        return arr

    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_path, self.job.ids_field)
        return self._tokenizer

    # ------------------------------------------------------------ running

    def run_shard(self, shard, meter, progress, out_path):
        rows = self.read_rows(shard)
        ids = np.concatenate([r[1] for r in rows]) if rows else np.zeros(0, dtype=np.int64)
        probs = np.zeros((len(ids), self.head.classes), dtype=np.float32)
        step = self.job.batch_tokens
        for start in range(0, len(ids), step):
            stop = min(start + step, len(ids))
            with meter.batch(stop - start):
                probs[start:stop] = self.forward(ids[start:stop])
            progress.advance(stop - start, meter.hit_rate())
        nbytes = self._write(rows, probs, out_path, meter)
        return {"rows": len(rows), "tokens": int(len(ids)), "bytes": nbytes}

    def forward(self, ids):
        h = self.head.embed_ids(ids)
        for layer in self.model.moe_layers:
            x = rmsnorm(h, self.head.layer_norms[layer], self.head.eps)
            h = h + self.executor.moe_forward(layer, x)
        return self.head.probs(h)

    def _write(self, rows, probs, out_path, meter):
        lines, offset = [], 0
        for row_id, ids, labels in rows:
            p = probs[offset:offset + len(ids)]
            offset += len(ids)
            pred = p.argmax(axis=1)
            if labels is not None:
                meter.add_accuracy(np.sum(pred == labels), len(labels))
            lines.append(json.dumps({"id": row_id, "pred": pred.tolist(),
                                     "probs": [[float(v) for v in tok] for tok in p]}, allow_nan=False))
        data = ("\n".join(lines) + ("\n" if lines else "")).encode()
        atomic_write(out_path, [data])
        return len(data)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def load_tokenizer(path, ids_field="input_ids"):
    if path is None or not os.path.isfile(path):
        found = f"{path} does not exist" if path else "none was found"
        raise ConfigError(f"job.tokenizer: text input needs the model's tokenizer.json, but {found} "
                          f"(set job.tokenizer, put tokenizer.json beside the model, or give token ids "
                          f"in '{ids_field}')")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InvalidArgument("text input needs the `tokenizers` package (pip install tokenizers), "
                              "or feed token ids instead") from None
    return tokenizer_call(Tokenizer.from_file, path,
                          fail=lambda why: FormatError(f"{path}: cannot load tokenizer: {why}"))


def find_tokenizer(job, model_path, model=None):
    """job.tokenizer, else tokenizer.json beside the model file (or inside it, if the model is a directory),
    else in the Hugging Face directory the model was converted from (recorded by the converter)."""
    if job.tokenizer:
        return job.tokenizer
    base = model_path if os.path.isdir(model_path) else os.path.dirname(os.path.abspath(model_path))
    candidates = [os.path.join(base, "tokenizer.json")]
    source_dir = (getattr(getattr(model, "config", None), "extra", None) or {}).get("source_dir")
    if source_dir:
        candidates.append(os.path.join(source_dir, "tokenizer.json"))
    return next((c for c in candidates if os.path.isfile(c)), None)
