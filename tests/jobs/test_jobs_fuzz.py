"""Bounded fuzzing of job configs and job inputs (issue 15, "keep them found").

hypothesis with derandomize=True and fixed example counts: the same cases on every run,
a few seconds in all. Every case ends in a result or one ColibriError naming the file
(configs: file:line:column), never another exception type.
"""
import atexit
import io
import json
import math
import os
import re
import shutil
import tempfile
from types import SimpleNamespace

import numpy as np
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colibri_dist import config as C
from colibri_dist.errors import ColibriError, ConfigError, FormatError
from colibri_dist.jobs.moe_layer import MoeLayer
from colibri_dist.jobs.run.shards import Shard
from colibri_dist.jobs.token_classification import TokenClassification
from jobs_helpers import FakeModel, tiny_demo

FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
WORK = tempfile.mkdtemp(prefix="colibri-fuzz-")
atexit.register(shutil.rmtree, WORK, True)

KEYS = ["job", "kind", "input", "model", "pool", "workers", "cache_bytes", "balancer", "threshold",
        "window", "report", "log_every_s", "demo", "dataset", "layers", "batch_tokens", "numa", "routing",
        "policy", "shard_rows", "threads", "replicas", "offload_dir", "zzz"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["64MiB", "1" + "9" * 40, "token-classification", "moe-layer", "all",
                                     "1.5GiB", "-3KB", ".nan", "~"]))
TREES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)), max_leaves=25)
GOOD = ("job:\n  kind: token-classification\n  batch_tokens: 256\nmodel: null\npool:\n  workers: 3\n"
        "  cache_bytes: 64MiB\n  balancer: {kind: round-robin, window: 32, threshold: 2.0}\n"
        "report: {log_every_s: 1.5}\n")
YAML_BITS = st.sampled_from(["[", "]", "{", "}", ":", " ", "\n", "-", "&a", "*a", "!!", "'", '"', "#",
                             ".nan", ".inf", "1e999", "\t", "? ", "|", ">", "%", "@", "\x00", "é"])


def _check_config(text):
    path = os.path.join(WORK, "job.yaml")
    try:
        cfg = C.load_config(path, text=text)
    except ConfigError as exc:
        assert re.match(re.escape(path) + r"(:\d+:\d+)?: ", str(exc)), str(exc)[:300]
        return
    for value in (cfg.pool.balancer.threshold, cfg.report.log_every_s):
        assert math.isfinite(value)
    assert cfg.pool.cache_bytes is None or 0 <= cfg.pool.cache_bytes < 2 ** 63


@FUZZ
@given(TREES)
def test_config_trees(tree):
    _check_config(yaml.safe_dump(tree))
    _check_config(yaml.safe_dump({"job": {"kind": "token-classification"}, "pool": tree, "report": tree}))


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(GOOD)), st.integers(0, 6), YAML_BITS), min_size=1, max_size=6))
def test_config_text_edits(edits):
    text = GOOD
    for at, cut, bit in edits:
        at = min(at, len(text))
        text = text[:at] + bit + text[at + cut:]
    _check_config(text)


# ---------------------------------------------------------------- job inputs

def _token_kind():
    cfg = C.load_config(os.path.join(WORK, "t.yaml"), text="job: {kind: token-classification, input: x}\n"
                                                           "model: m.colibri\n")
    return TokenClassification(cfg, FakeModel(tiny_demo()), "m.colibri")


TOKEN_KIND = _token_kind()
JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2 ** 80, 2 ** 80),
                                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8)),
                           lambda inner: st.one_of(st.lists(inner, max_size=6),
                                                   st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                           max_leaves=20)
ROWS = st.fixed_dictionaries({}, optional={"id": JSON_VALUES, "input_ids": st.one_of(
    st.lists(st.integers(-5, 70), max_size=8), JSON_VALUES), "labels": JSON_VALUES, "text": JSON_VALUES})


def _lines(rows, junk):
    out = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    return out + junk


@FUZZ
@given(st.lists(ROWS, max_size=5), st.one_of(st.just(b""), st.binary(max_size=40)))
def test_token_classification_rows(rows, junk):
    path = os.path.join(WORK, "in.jsonl")
    with open(path, "wb") as fh:
        fh.write(_lines(rows, junk))
    try:
        n = TOKEN_KIND.count_rows(path)
        got = TOKEN_KIND.read_rows(Shard("s", path, 0, n))
    except FormatError as exc:
        assert re.match(re.escape(path) + r":\d+: ", str(exc)), str(exc)[:300]
        return
    except ConfigError as exc:          # text rows without a tokenizer: the one config error
        assert "job.tokenizer" in str(exc)
        return
    for row_id, ids, labels in got:
        json.dumps(row_id, allow_nan=False)
        assert ids.dtype == np.int64 and ((ids >= 0) & (ids < 64)).all()
        assert labels is None or labels.shape == ids.shape


def _moe_kind():
    model = SimpleNamespace(moe_layers=[0], config=SimpleNamespace(hidden=8, n_experts=4))
    return MoeLayer(SimpleNamespace(job=SimpleNamespace(layers="all", batch_tokens=4)), model, "m.colibri")


MOE_KIND = _moe_kind()


def _npy(dtype, rows, cols):
    buf = io.BytesIO()
    np.save(buf, np.ones((rows, cols), dtype=dtype))
    return bytearray(buf.getvalue())


@FUZZ
@given(st.sampled_from(["<f4", "<f8", "<f2", "<i4", ">f4"]), st.integers(0, 5), st.sampled_from([8, 7, 0]),
       st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4), st.integers(0, 300))
def test_moe_layer_npy(dtype, rows, cols, flips, keep):
    raw = _npy(dtype, rows, cols)
    for at, value in flips:
        if at < len(raw):
            raw[at] = value
    path = os.path.join(WORK, "in.npy")
    with open(path, "wb") as fh:
        fh.write(bytes(raw[:keep]) if keep < 200 else bytes(raw))
    try:
        n = MOE_KIND.count_rows(path)
        arr = np.asarray(MOE_KIND._open(path))
    except ColibriError as exc:
        assert path in str(exc), str(exc)[:300]
        return
    assert arr.shape == (n, 8) and arr.dtype == np.float32
