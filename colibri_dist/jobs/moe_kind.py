"""What the kinds that run their rows through the MoE executor alone share (moe-layer, token-classification).

Role in the data flow: the runner (runner.py, the hooks it asks of a kind) opens such a kind over the
container (`opened`: the reader, for what the rows need: hidden size, vocabulary, dense tensors), plans the
shards with its `count_rows`, then opens its engine: the MoE executor alone (`open_engine`:
run/executors.open_executor -> front.open_experts, in process or on a pool); each shard runs alone
(`run_group` -> the kind's `run_shard`, batches of `job.batch_tokens` tokens through `meter.batch`,
`progress.advance`), and the report holds the MoE fields (reports/report.moe_fields).
"""
import contextlib
import os

from .reports.metrics import Meter, summary_rows
from .reports.page import moe_figures
from .reports.report import moe_fields


class MoeKind:
    input_hint = None
    unit = "tokens"                  # what the progress counts
    shards_word = "shards"
    partial_rows = False             # a shard is written whole; nothing is kept of one in flight
    run_keys = ("tokens_per_s", "cache")
    executor = None                  # the MoE executor, once the runner opened it

    @classmethod
    def check(cls, cfg):
        """Nothing to check before the disk: the settings are checked against the model once it is open."""

    @classmethod
    def demo(cls, cfg, log):
        """`model: null`: the demo classifier and its dataset -> (model, data dir, extra report fields: none)."""
        from ..demos.classifier import ensure_demo
        art = ensure_demo(cfg.demo, log=log)
        return art.model, art.data_dir, None

    @classmethod
    @contextlib.contextmanager
    def opened(cls, cfg, model_path, openers):
        opener = openers.model
        if opener is None:
            from ..format.reader import open_model as opener
        with opener(model_path) as model:
            yield cls.of(cfg, model, model_path)

    @classmethod
    def of(cls, cfg, model, model_path):
        return cls(cfg, model, model_path)

    def open_engine(self, cfg, offload_dir, log, openers):
        from .run.executors import open_executor
        return (openers.executor or open_executor)(cfg, self.path, offload_dir)

    def attach(self, engine):
        self.executor = engine

    def meter(self, engine, heat):
        return Meter(engine, self.n_experts_by_layer(), heat=heat)

    def size(self, shard, info=None):
        """Progress units (tokens) of a shard: from its manifest entry when written."""
        return info["tokens"] if info is not None else self.count_tokens(shard)

    def groups(self, pending):
        return ([s] for s in pending)

    def run_group(self, shards, out_dir, meter, progress, partial=None):
        out = []
        for shard in shards:
            name = self.output_name(shard)
            out.append((shard, name, self.run_shard(shard, meter, progress, os.path.join(out_dir, name))))
        return out

    report_fields = staticmethod(moe_fields)
    summary_rows = staticmethod(summary_rows)
    figures = staticmethod(moe_figures)

    @staticmethod
    def workers(rep):
        return rep.get("workers") or []
