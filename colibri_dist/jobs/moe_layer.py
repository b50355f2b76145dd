"""Job kind `moe-layer`: hidden states in `.npy` shards through one or several MoE layers, `.npy` out.

Role in the data flow: a MoeKind (moe_kind.py: the container opened, the MoE executor for the layers);
each input shard is a float array [rows, hidden]; the runner calls `run_shard`, which feeds
`job.batch_tokens` rows at a time through the selected layers in sequence (`x = moe_l(x)` for each l in
`job.layers`, just the MoE blocks: no norm, no residual) and writes float32 [rows, hidden].
"""
import io

import numpy as np

from ..errors import ConfigError, FormatError
from ..fsutil import atomic_write
from .moe_kind import MoeKind

INPUT_HINT = ("a moe-layer job reads hidden states: .npy files of float32 [rows, hidden] (numpy.save); "
              "JSONL/Parquet prompts are for `job.kind: generate` or `score`, token ids for `token-classification`")


class MoeLayer(MoeKind):
    input_exts = (".npy",)
    input_hint = INPUT_HINT

    def __init__(self, cfg, model, model_path, tokenizer_path=None):
        self.job = cfg.job
        self.model = model
        self.path = model_path
        self.hidden = model.config.hidden
        self.layers = self._select_layers(cfg.job.layers)

    def _select_layers(self, spec):
        available = list(self.model.moe_layers)
        layers = available if spec == "all" else ([spec] if isinstance(spec, int) else list(spec))
        for layer in layers:
            if layer not in available:
                raise ConfigError(f"job.layers: layer {layer} is not a MoE layer of {self.path} "
                                  f"(MoE layers: {available})")
        return layers

    def settings(self):
        """Its part of the resume signature (run/signature.py)."""
        return {"job.layers": self.layers}

    def output_name(self, shard):
        return f"{shard.name}.npy"

    def n_experts_by_layer(self):
        return {l: self.model.config.n_experts for l in self.layers}

    def _open(self, path):
        if not path.endswith(".npy"):
            raise FormatError(f"{path}: {INPUT_HINT}")
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except Exception as exc:     # hostile bytes: EOFError, ValueError, SyntaxError, TokenError, ...
            raise FormatError(f"{path}: not a readable .npy array ({type(exc).__name__}: "
                              f"{str(exc)[:200] or 'empty file'})") from None
        if not isinstance(arr, np.ndarray):
            raise FormatError(f"{path}: not a readable .npy array (an archive, not one array)")
        if arr.ndim != 2 or arr.shape[1] != self.hidden:
            raise FormatError(f"{path}: expected hidden states of shape [rows, {self.hidden}], got {list(arr.shape)}")
        if arr.dtype != np.float32:      # no silent cast: float64 would lose bits, float16 says the wrong thing
            raise FormatError(f"{path}: expected float32 hidden states, got dtype {arr.dtype} "
                              f"(convert with arr.astype(np.float32) if that is what you mean)")
        return arr

    def count_rows(self, path):
        return int(self._open(path).shape[0])

    def count_tokens(self, shard):
        return shard.rows

    def run_shard(self, shard, meter, progress, out_path):
        src = self._open(shard.path)
        out = np.zeros((shard.rows, self.hidden), dtype=np.float32)
        step = self.job.batch_tokens
        for start in range(0, shard.rows, step):
            stop = min(start + step, shard.rows)
            x = np.ascontiguousarray(src[shard.start + start:shard.start + stop], dtype=np.float32)
            if not np.isfinite(x).all():
                bad = shard.start + start + int(np.argwhere(~np.isfinite(x))[0][0])
                raise FormatError(f"{shard.path}: row {bad} has a NaN or Inf value")
            with meter.batch(stop - start):
                for layer in self.layers:
                    x = self.executor.moe_forward(layer, x)
            out[start:stop] = x
            progress.advance(stop - start, meter.hit_rate())
        buf = io.BytesIO()
        np.save(buf, out, allow_pickle=False)
        data = buf.getvalue()
        atomic_write(out_path, [data])
        return {"rows": shard.rows, "tokens": shard.rows, "bytes": len(data)}
