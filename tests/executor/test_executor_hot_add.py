"""Hot-added experts: persisted, routable at once, exact, survive reopen; removal is exact for the rest."""
import shutil

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist import native
from colibri_dist.errors import InvalidArgument
from colibri_dist.format.quantize import pack_expert
from colibri_dist.store import segments as segmod
from engine_models import expert_weights, tokens


@pytest.fixture
def model_copy(engine_models, tmp_path):
    def copy(family):
        dst = tmp_path / f"{family}.colibri"
        shutil.copyfile(engine_models[family], dst)
        return str(dst)
    return copy


def test_engine_add_expert_routes_persists_and_is_exact(model_copy, tmp_path):
    path = model_copy("mixtral")
    x = tokens(5, seed=11)
    x = x + 3.0 * np.ones_like(x)               # a shared direction the new row can latch onto
    weights = expert_weights(seed=99)
    row = np.full(x.shape[1], 2.0, np.float32)
    with cd.MoeExecutor(path, threads=1) as eng:
        before = eng.moe_forward(0, x)
        new_id = eng.add_expert(0, weights, row)
        assert new_id == 8
        idx, w = eng.route(0, x)
        assert (idx == 8).any(axis=1).all()      # routable at once
        after_mapped = eng.moe_forward(0, x)
        assert not np.array_equal(before, after_mapped)
        blob, layout = pack_expert(weights["gate"], weights["up"], weights["down"], eng.config.scheme)
        direct = eng.runtime.expert_forward(x, native.expert_view(blob, layout))
        assert np.array_equal(eng.expert_forward(0, 8, x), direct)
        assert eng.add_expert(0, expert_weights(seed=100), -row) == 9
    for budget in [None, 2 * layout.nbytes]:      # reopen: mapped and streamed paths see both
        with cd.MoeExecutor(path, threads=1, cache_bytes=budget, offload_dir=str(tmp_path / "off")) as eng:
            assert eng.store.n_experts(0) == 10 and eng.store.n_experts(1) == 8
            assert np.array_equal(eng.moe_forward(0, x), after_mapped)
            assert np.array_equal(eng.route(0, x)[0], idx)


def test_engine_remove_expert_hides_it_exactly(model_copy):
    path = model_copy("mixtral")                 # softmax-top-k-renormalise: others' weights unchanged
    x = tokens(64, seed=12)
    with cd.MoeExecutor(path, threads=1) as eng:
        idx0, _ = eng.route(1, x)
        y0 = eng.moe_forward(1, x)
        victim = int(np.bincount(idx0.ravel()).argmax())
        eng.remove_expert(1, victim)
        idx1, _ = eng.route(1, x)
        y1 = eng.moe_forward(1, x)
        assert not (idx1 == victim).any()
        untouched = ~(idx0 == victim).any(axis=1)
        assert untouched.any() and (~untouched).any()
        assert np.array_equal(y1[untouched], y0[untouched])
        assert np.array_equal(idx1[untouched], idx0[untouched])
    with cd.MoeExecutor(path, threads=1, cache_bytes=1 << 16) as eng:   # persisted; streamed path agrees
        assert np.array_equal(eng.moe_forward(1, x), y1)
        assert not (eng.route(1, x)[0] == victim).any()


def test_engine_crash_mid_add_keeps_previous_state(model_copy, monkeypatch):
    path = model_copy("qwen2_moe")
    x = tokens(4, seed=13)
    real = segmod._rename

    def crash(src, dst):
        if dst.endswith(segmod.MANIFEST):
            raise OSError("simulated crash between write and rename")
        real(src, dst)

    with cd.MoeExecutor(path, threads=1) as eng:
        y = eng.moe_forward(0, x)
        monkeypatch.setattr(segmod, "_rename", crash)
        with pytest.raises(OSError, match="simulated crash"):
            eng.add_expert(0, expert_weights(seed=1), np.ones(x.shape[1], np.float32))
        monkeypatch.setattr(segmod, "_rename", real)
        assert eng.store.n_experts(0) == 8 and np.array_equal(eng.moe_forward(0, x), y)
    with cd.MoeExecutor(path, threads=1) as eng:
        assert eng.store.n_experts(0) == 8 and np.array_equal(eng.moe_forward(0, x), y)
        assert eng.add_expert(0, expert_weights(seed=1), np.ones(x.shape[1], np.float32)) == 8


def test_engine_hot_add_bad_input(model_copy):
    with cd.MoeExecutor(model_copy("mixtral"), threads=1) as eng:
        w = expert_weights(seed=3)
        with pytest.raises(InvalidArgument, match=r"weights\['up'\] has shape"):
            eng.add_expert(0, dict(w, up=w["up"][:, :-1]), np.ones(32, np.float32))
        with pytest.raises(InvalidArgument, match="router_row must be 32 finite floats"):
            eng.add_expert(0, w, np.ones(31, np.float32))
        with pytest.raises(InvalidArgument, match="NaN or Inf"):
            eng.add_expert(0, dict(w, down=w["down"] * np.nan), np.ones(32, np.float32))
        with pytest.raises(InvalidArgument, match="correction bias"):
            eng.add_expert(0, w, np.ones(32, np.float32), bias=0.5)
        for e in range(6):
            eng.remove_expert(0, e)
        with pytest.raises(InvalidArgument, match="fewer than top_k=2"):
            eng.remove_expert(0, 6)
        assert eng.store.n_experts(0) == 8
    with cd.MoeExecutor(model_copy("deepseek_v3"), threads=1) as eng:
        with pytest.raises(InvalidArgument, match="group-limited gating"):
            eng.add_expert(0, expert_weights(seed=3), np.ones(32, np.float32))


def test_gpt_oss_add_expert_needs_and_keeps_the_expert_biases(tmp_path):
    # gpt-oss's experts carry biases and the clamped SwiGLU: a hot-added one must too, and it persists
    pytest.importorskip("transformers")
    from colibri_dist.format.tiny import write_tiny
    write_tiny("gpt_oss", tmp_path / "src")
    path = tmp_path / "g.colibri"
    cd.convert(tmp_path / "src", path, experts="f32", progress=False)
    x = tokens(6, seed=3)
    weights = expert_weights(seed=7)
    rng = np.random.default_rng(8)
    biased = dict(weights, **{k: rng.standard_normal(n).astype(np.float32)
                              for k, n in (("gate_bias", 16), ("up_bias", 16), ("down_bias", 32))})
    row = np.full(x.shape[1], 0.5, np.float32)
    with cd.MoeExecutor(str(path), threads=1) as eng:
        with pytest.raises(InvalidArgument, match="'gate_bias', 'up_bias' and 'down_bias'"):
            eng.add_expert(1, weights, row)
        assert eng.add_expert(1, biased, row, bias=0.25) == 8
        layout = eng.store.source.layout(1, 0)
        blob, new = pack_expert(weights["gate"], weights["up"], weights["down"], "f32",
                                biases=(biased["gate_bias"], biased["up_bias"], biased["down_bias"]), act=layout.act)
        assert new == layout and layout.act.kind == "swiglu_oai" and layout.biases is not None
        direct = eng.runtime.expert_forward(x, native.expert_view(blob, new))
        assert np.array_equal(eng.expert_forward(1, 8, x), direct)
    with cd.MoeExecutor(str(path), threads=1) as eng:                     # reopened from the segment
        assert np.array_equal(eng.expert_forward(1, 8, x), direct)
