"""The C reader (cb_model_*) sees the same model as the Python reader, bit for bit.

A C program's path - cb_model_open -> cb_model_moe_layer -> cb_moe_forward -
must give exactly the MoeExecutor's output, for every family (shared experts,
shared gate, DeepSeek bias and grouping included) and an int8 scheme.
"""
import os

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.format.tiny import FAMILIES


@pytest.fixture
def c_model():
    from colibri_dist._native import ffi, lib
    opened = []

    def open_(path, verify=1):
        out = ffi.new("cb_model **")
        status = lib.cb_model_open(os.fsencode(path), verify, out)
        assert status == 0, ffi.string(lib.cb_last_error()).decode()
        opened.append(out[0])
        return out[0]
    yield open_
    for m in opened:
        lib.cb_model_close(m)


def c_moe_forward(model, layer, x):
    from colibri_dist._native import ffi, lib
    moe = ffi.new("cb_moe_layer *")
    assert lib.cb_model_moe_layer(model, layer, moe) == 0
    eng = ffi.new("cb_engine **")
    assert lib.cb_engine_create(1, ffi.NULL, 0, eng) == 0
    n, h = x.shape
    y = np.empty_like(x)
    idx = np.empty((n, moe.gating.top_k), np.int32)
    w = np.empty((n, moe.gating.top_k), np.float32)
    try:
        status = lib.cb_moe_forward(eng[0], moe, ffi.cast("float *", ffi.from_buffer(x)), n,
                                    ffi.cast("float *", ffi.from_buffer(y)),
                                    ffi.cast("int32_t *", ffi.from_buffer(idx)),
                                    ffi.cast("float *", ffi.from_buffer(w)))
        assert status == 0, ffi.string(lib.cb_engine_last_error(eng[0])).decode()
    finally:
        lib.cb_engine_destroy(eng[0])
    return y


@pytest.mark.parametrize("family,scheme", [(f, "f32") for f in FAMILIES] + [("qwen2_moe", "int8-g32")])
def test_c_reader_forward_equals_engine(converted, c_model, family, scheme):
    path, _ = converted(family, scheme)
    m = c_model(path)
    layer = cd.open_model(path).moe_layers[-1]
    x = np.random.default_rng(3).standard_normal((24, 32)).astype(np.float32)
    with cd.MoeExecutor(path) as eng:
        want = eng.moe_forward(layer, x)
    assert np.array_equal(c_moe_forward(m, layer, x), want)


def test_c_info_and_tensors_match_python(converted, c_model):
    from colibri_dist._native import ffi, lib
    path, _ = converted("deepseek_v3", "f32")
    m = c_model(path)
    info = ffi.new("cb_model_info *")
    assert lib.cb_model_get_info(m, info) == 0
    with cd.open_model(path) as model:
        c = model.config
        assert (info.hidden, info.inter, info.n_experts, info.top_k, info.n_layers, info.n_moe_layers,
                info.shared_inter) == (c.hidden, c.inter, c.n_experts, c.top_k, c.n_layers, 1, c.shared_inter)
        assert (info.gating.kind, info.gating.n_group, info.gating.topk_group) == (2, 4, 2)
        moe = ffi.new("cb_moe_layer *")
        assert lib.cb_model_moe_layer(m, 1, moe) == 0
        bias = np.frombuffer(ffi.buffer(moe.bias, 4 * c.n_experts), np.float32)
        assert np.array_equal(bias, model.correction_bias(1))
        assert lib.cb_model_moe_layer(m, 0, moe) == 1          # dense layer
        assert b"layer 0 is not a MoE layer" in ffi.string(lib.cb_model_last_error(m))
        data, shape, ndim = ffi.new("const float **"), ffi.new("int64_t[4]"), ffi.new("int32_t *")
        name = b"model.embed_tokens.weight"
        assert lib.cb_model_tensor_f32(m, name, data, shape, ndim) == 0
        arr = np.frombuffer(ffi.buffer(data[0], 4 * shape[0] * shape[1]), np.float32).reshape(shape[0], shape[1])
        assert ndim[0] == 2 and np.array_equal(arr, model.tensor(name.decode()))
        assert lib.cb_model_tensor_f32(m, b"no.such.tensor", data, shape, ndim) == 1


def test_c_tensor_f32_rejects_other_dtypes(converted, c_model):
    from colibri_dist._native import ffi, lib
    path, _ = converted("olmoe", "f32", "hub", "bfloat16")
    m = c_model(path)
    data, shape, ndim = ffi.new("const float **"), ffi.new("int64_t[4]"), ffi.new("int32_t *")
    assert lib.cb_model_tensor_f32(m, b"model.norm.weight", data, shape, ndim) == 5   # CB_E_UNSUPPORTED
    assert b"not float32" in ffi.string(lib.cb_model_last_error(m))
