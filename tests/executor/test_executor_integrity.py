"""Damaged and hostile containers through the MoeExecutor (issue 15, defects 1 and 2).

Every tensor is checked before its first use in a process, on every path
(zero-copy mmap, RAM cache, tiny budget), so a flipped bit or a NaN scale gives
the same FormatError whatever the budget; nothing is ever served silently.
"""
import shutil
import struct

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import FormatError, InvalidArgument
from colibri_dist.format import spec
from engine_models import expert_weights, tokens

BUDGETS = [None, 1 << 20, 1]          # mmap, everything fits, one expert at a time (streamed)


@pytest.fixture
def model_copy(engine_models, tmp_path):
    def copy(family):
        dst = tmp_path / f"{family}.colibri"
        shutil.copyfile(engine_models[family], dst)
        return str(dst)
    return copy


def _entry(path, pred):
    with cd.open_model(path) as m:
        return next(e for e in m.entries if pred(e))


def _flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ 0x10]))


def _write_fix_crc(path, entry, rel, data):
    """Overwrite bytes inside an entry and recompute its CRC, the table CRC and the header CRC."""
    raw = bytearray(open(path, "rb").read())
    raw[entry.offset + rel:entry.offset + rel + len(data)] = data
    h = spec.unpack_header(bytes(raw[:spec.HEADER_SIZE]))
    t0, n = h["table_offset"], h["table_count"]
    for i in range(n):
        at = t0 + i * spec.ENTRY_SIZE
        e = spec.Entry.unpack(bytes(raw[at:at + spec.ENTRY_SIZE]))
        if e.offset == entry.offset:
            struct.pack_into("<I", raw, at + 192, spec.crc32(bytes(raw[e.offset:e.offset + e.nbytes])))
    struct.pack_into("<I", raw, 64, spec.crc32(bytes(raw[t0:t0 + n * spec.ENTRY_SIZE])))
    struct.pack_into("<I", raw, spec.HEADER_CRC_SPAN, spec.crc32(bytes(raw[:spec.HEADER_CRC_SPAN])))
    open(path, "wb").write(bytes(raw))


def _forward_error(path, cache_bytes, layer=0):
    with cd.MoeExecutor(path, threads=1, cache_bytes=cache_bytes) as eng:
        with pytest.raises(FormatError) as info:
            eng.moe_forward(layer, tokens(64, seed=3))
    return str(info.value)


@pytest.mark.parametrize("cache_bytes", BUDGETS)
def test_flipped_bit_in_expert_raises_on_every_budget(model_copy, cache_bytes):
    path = model_copy("mixtral")
    e = _entry(path, lambda e: e.kind == spec.KIND_EXPERT and e.layer == 0 and e.expert == 0)
    _flip(path, e.offset + 5)
    msg = _forward_error(path, cache_bytes)
    assert path in msg and "layer 0 expert 0" in msg and "checksum" in msg


@pytest.mark.parametrize("cache_bytes", BUDGETS)
@pytest.mark.parametrize("family,kind", [("mixtral", spec.KIND_ROUTER), ("qwen2_moe", spec.KIND_SHARED),
                                         ("qwen2_moe", spec.KIND_SHARED_GATE),
                                         ("deepseek_v3", spec.KIND_BIAS)])
def test_flipped_byte_in_router_or_shared_parts_raises(model_copy, family, kind, cache_bytes):
    path = model_copy(family)
    e = _entry(path, lambda e: e.kind == kind and e.layer == 0)
    _flip(path, e.offset + 2)
    msg = _forward_error(path, cache_bytes)
    assert path in msg and "layer 0" in msg and spec.KIND_NAMES[kind] in msg


@pytest.mark.parametrize("cache_bytes", BUDGETS)
def test_nan_scale_with_fixed_crcs_raises_on_every_budget(model_copy, cache_bytes):
    path = model_copy("mixtral")                       # int8: per-row scales after the data
    e = _entry(path, lambda e: e.kind == spec.KIND_EXPERT and e.layer == 0 and e.expert == 1)
    _write_fix_crc(path, e, e.matrices[1].scale_offset + 4, struct.pack("<f", float("nan")))
    msg = _forward_error(path, cache_bytes)
    assert "layer 0 expert 1" in msg and "non-finite scale" in msg
    with cd.open_model(path) as m, pytest.raises(FormatError, match="layer 0 expert 1"):
        m.verify(progress=False)


def test_nan_router_row_with_fixed_crcs_raises(model_copy):
    path = model_copy("mixtral")
    e = _entry(path, lambda e: e.kind == spec.KIND_ROUTER and e.layer == 1)
    _write_fix_crc(path, e, 8, struct.pack("<f", float("inf")))
    for cache_bytes in BUDGETS:
        msg = _forward_error(path, cache_bytes, layer=1)
        assert "layer 1 router" in msg and "non-finite" in msg


def test_checks_once_and_opt_out(model_copy):
    """The mmap path checks each tensor once per process; checksums=False is the explicit opt-out."""
    path = model_copy("mixtral")
    x = tokens(16, seed=4)
    with cd.MoeExecutor(path, threads=1) as eng:
        y = eng.moe_forward(0, x)
        checked = eng.model.integrity_stats()["checked"]
        assert checked >= 9                               # router + 8 experts of layer 0
        eng.moe_forward(0, x)
        assert eng.model.integrity_stats()["checked"] == checked
    e = _entry(path, lambda e: e.kind == spec.KIND_EXPERT and e.layer == 1 and e.expert == 3)
    _flip(path, e.offset + 9)
    with cd.MoeExecutor(path, threads=1, checksums=False) as eng:
        assert np.array_equal(eng.moe_forward(0, x), y)   # layer 0 untouched; layer 1 unchecked
        eng.moe_forward(1, x)


def test_hot_add_rejects_overflowing_weights(model_copy):
    path = model_copy("mixtral")
    w = expert_weights(seed=5)
    w["up"] = np.full_like(w["up"], 3e38)
    with cd.MoeExecutor(path, threads=1) as eng:
        with pytest.raises(InvalidArgument, match="'up'.*magnitude"):
            eng.add_expert(0, w, np.ones(eng.config.hidden, np.float32))
        w = expert_weights(seed=5)
        with pytest.raises(InvalidArgument, match="router_row"):
            eng.add_expert(0, w, np.full(eng.config.hidden, 1e30, np.float32))
        assert np.isfinite(eng.moe_forward(0, tokens(8))).all()


def test_overflowing_finite_weights_fail_the_same_on_every_budget(tmp_path):
    """An f32 expert of 1e38s converts (finite) but overflows on any input: every path says so."""
    from colibri_dist.errors import NativeError
    from engine_models import make_model, write_checkpoint
    from safetensors.numpy import load_file, save_file
    src = write_checkpoint("mixtral", str(tmp_path / "src"))
    tensors = load_file(f"{src}/model.safetensors")
    for e in range(8):
        tensors[f"model.layers.0.block_sparse_moe.experts.{e}.w3.weight"][:] = 1e38
    save_file(tensors, f"{src}/model.safetensors")
    path = str(tmp_path / "big.colibri")
    cd.convert(src, path, experts="f32", progress=False)
    messages = set()
    for cache_bytes in BUDGETS:
        with cd.MoeExecutor(path, threads=1, cache_bytes=cache_bytes) as eng:
            with pytest.raises(NativeError, match="layer 0: non-finite MoE output") as info:
                eng.moe_forward(0, tokens(16, seed=2))
            messages.add(str(info.value))
    assert len(messages) == 1
    with pytest.raises(FormatError, match="does not fit float16"):
        cd.convert(src, str(tmp_path / "f16.colibri"), experts="f16", progress=False)


def test_the_benchmarks_expert_precheck_checks_every_expert_once(model_copy):
    """bench's check_experts runs the first-use check of every expert before timing: the count of checked
    tensors covers all experts, a forward adds none of them, and a damaged expert is named."""
    from types import SimpleNamespace
    from colibri_dist.bench.model.peer_colibri import check_experts
    path = model_copy("mixtral")
    with cd.MoeExecutor(path, threads=1) as eng:
        cfg = eng.model.config
        check_experts(SimpleNamespace(executor=eng))
        checked = eng.model.integrity_stats()["checked"]
        assert checked == len(eng.model.moe_layers) * cfg.n_experts
        eng.moe_forward(0, tokens(16, seed=4))
        assert eng.model.integrity_stats()["checked"] == checked + 1      # layer 0's router only
    e = _entry(path, lambda e: e.kind == spec.KIND_EXPERT and e.layer == 1 and e.expert == 3)
    _flip(path, e.offset + 9)
    with cd.MoeExecutor(path, threads=1) as eng, pytest.raises(FormatError, match="layer 1 expert 3"):
        check_experts(SimpleNamespace(executor=eng))
