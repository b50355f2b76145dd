"""Helpers for the jobs tests that run without Ray or the native core.

`FakeModel` mimics the container reader over the demo generator's float
weights, and `FakeExecutor` is a plain numpy MoE (softmax top-k, renormalised)
standing in for the MoeExecutor/Pool: enough to test the runner, resume, reports
and the job kinds in isolation. Tests that need the real stack use the real
reader and MoeExecutor instead.
"""
import os
from types import SimpleNamespace

import numpy as np

from colibri_dist.routing.heat import ExpertHeat

from colibri_dist.config import DemoConfig, DemoDatasetConfig
from colibri_dist.demos.classifier import generate_weights

TINY_DEMO = dict(seed=3, vocab_size=64, hidden=16, inter=32, layers=2, experts=4, top_k=2, classes=5)


def tiny_demo(shards=3, rows=5, seq=6):
    return DemoConfig(**TINY_DEMO, dataset=DemoDatasetConfig(shards=shards, rows_per_shard=rows, seq_len=seq))


class FakeModel:
    def __init__(self, demo):
        self.tensors, self.class_of, self.token_probs = generate_weights(demo)
        self.moe_layers = list(range(demo.layers))
        self.config = SimpleNamespace(n_experts=demo.experts, top_k=demo.top_k, hidden=demo.hidden,
                                      extra={"rms_norm_eps": 1e-5})

    def tensor(self, name):
        return self.tensors[name]

    def tensor_names(self):
        return list(self.tensors)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakeExecutor:
    """Numpy MoE over FakeModel weights; counts calls; can be told to die after N forwards."""
    kind = "fake"

    def __init__(self, model, fail_after=None):
        self.m, self.calls, self.fail_after = model, 0, fail_after
        self.closed = False
        self.lookups = 0
        self.heat = ExpertHeat()            # counted where it routes, as the MoeExecutor and the pool client do

    def route(self, layer, x):
        logits = x @ self.m.tensors[f"model.layers.{layer}.block_sparse_moe.gate.weight"].T
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        idx = np.argsort(-p, axis=1, kind="stable")[:, :self.m.config.top_k].astype(np.int32)
        w = np.take_along_axis(p, idx, 1)
        return idx, (w / w.sum(1, keepdims=True)).astype(np.float32)

    def moe_forward(self, layer, x):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        idx, w = self.route(layer, x)
        y = np.zeros_like(x)
        for t in range(len(x)):
            for j in range(idx.shape[1]):
                q = f"model.layers.{layer}.block_sparse_moe.experts.{idx[t, j]}"
                a = self.m.tensors[q + ".w1.weight"] @ x[t]
                b = self.m.tensors[q + ".w3.weight"] @ x[t]
                y[t] += w[t, j] * (self.m.tensors[q + ".w2.weight"] @ (a / (1 + np.exp(-a)) * b))
        self.lookups += idx.size
        if self.heat.on:
            self.heat.add(layer, idx)
        return y

    def count_heat(self):
        self.heat.on = True

    def heat_report(self):
        return self.heat.report()

    def stats(self):
        hits = self.lookups * 3 // 4
        return {"cache": {"hits": hits, "misses": self.lookups - hits, "evictions": 1, "bytes_loaded": 4096},
                "workers": [{"id": "w0", "tokens": self.lookups, "experts": 4, "cpus": 1, "node": 0},
                            {"id": "w1", "tokens": self.lookups // 2, "experts": 4, "cpus": 1, "node": 0}],
                "retries": 0}

    def close(self):
        self.closed = True


def read_jsonl(path):
    import json
    with open(path) as fh:
        return [json.loads(line) for line in fh]


def output_rows(out_dir):
    rows = []
    for name in sorted(os.listdir(out_dir)):
        if name.endswith(".jsonl"):
            rows += read_jsonl(os.path.join(out_dir, name))
    return rows
