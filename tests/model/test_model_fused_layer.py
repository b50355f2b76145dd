"""The fused decoder layer (one native call per layer, native/src/layer.c) gives the op-by-op path's bits:
logits and KV cache pools exactly equal for every GQA family case (biases, QK-norm per head and over the
projection with clip_qkv, sliding windows, dense MLP layers, shared experts), weight-only and w8a8/w4a8,
over chunked prefill and decode steps beside other sequences. MLA layers keep the op-by-op path."""
import numpy as np
import pytest

import colibri_dist as cd
from model_cases import CASES

GQA = [c for c in CASES if not c.startswith("deepseek")]


def ids(n, seed, vocab=97):
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


def run(llm):
    """Two sequences: chunked prefill together, then three decode steps in one call each."""
    a, b = llm.new_sequence(), llm.new_sequence()
    out = llm.forward([(a, ids(19, 1), True), (b, ids(6, 2), True)])
    out += llm.forward([(a, ids(4, 3), True), (b, ids(11, 4), [0, -1])])
    for t in range(3):
        out += llm.forward([(b, [t + 5], False), (a, [t + 9], True)])
    return np.concatenate([o.reshape(-1) for o in out])


def pools(llm):
    return [p.copy() for p in llm.cache.k + llm.cache.v]


@pytest.mark.parametrize("experts,dense,w8a8", [("f32", None, False), ("int8", "int8", True),
                                                ("int4-g64", "int4-g64", True)])
@pytest.mark.parametrize("case", GQA)
def test_fused_layer_equals_op_by_op(whole_model, case, experts, dense, w8a8):
    path, _ = whole_model(case, experts=experts, dense=dense)
    with cd.LLM(path, w8a8=w8a8) as fused, cd.LLM(path, w8a8=w8a8) as plain:
        plain.decoder.fused = False
        assert fused.decoder.fusing() and not plain.decoder.fusing()
        got, ref = run(fused), run(plain)
        assert fused.decoder._plans, "the fused path was not taken"
        assert np.array_equal(got, ref)
        for p, q in zip(pools(fused), pools(plain)):
            assert np.array_equal(p, q)


@pytest.mark.parametrize("case", ["qwen3_moe", "mixtral"])
def test_whole_step_equals_the_checked_layer_by_layer_path(whole_model, case, monkeypatch):
    """Every layer fused: the step is one native.fused_forward pass (no per-call checks); COLIBRI_DEBUG_CHECKS
    routes it through the checked wrappers (Step, layer_forward per layer, rmsnorm, matmul): the same bits."""
    from colibri_dist.model import decoder
    path, _ = whole_model(case, experts="int8", dense="int8")
    with cd.LLM(path) as whole, cd.LLM(path) as checked:
        calls = []
        monkeypatch.setattr(decoder.native, "fused_forward", _spy(decoder.native.fused_forward, calls))
        got = run(whole)
        assert len(calls) == 5, "the whole-step path was not taken"
        monkeypatch.setattr(decoder, "DEBUG_CHECKS", True)
        want = run(checked)
        assert len(calls) == 5, "COLIBRI_DEBUG_CHECKS still took the whole-step path"
    assert np.array_equal(got, want)
    assert all(np.array_equal(p, q) for p, q in zip(pools(whole), pools(checked)))


def _spy(fn, calls):
    def spy(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)
    return spy


def test_a_bad_token_id_is_named_by_its_step(whole_model):
    path, _ = whole_model("qwen3_moe", experts="int8", dense="int8")
    with cd.LLM(path) as llm:
        a, b = llm.new_sequence(), llm.new_sequence()
        with pytest.raises(cd.InvalidArgument, match=r"step 1 \(sequence .*token id 97 at position 2 is outside"):
            llm.forward([(a, [1, 2], True), (b, [3, 4, 97], True)])
        with pytest.raises(cd.InvalidArgument, match=r"step 0 .*must be integers"):
            llm.forward([(a, [1.5], True)])
        assert llm.cache.free_blocks() == llm.cache.n_blocks        # nothing reserved by a refused step


def run_trusted(llm):
    """run()'s steps with want a bool (the engine's steps) through forward_trusted, and the same through forward."""
    out = []
    for forward in (llm.forward_trusted, llm.forward):
        a, b = llm.new_sequence(), llm.new_sequence()
        got = forward([(a, ids(19, 1), True), (b, ids(6, 2), False)])
        got += forward([(a, ids(4, 3), False), (b, ids(11, 4), True)])
        for t in range(3):
            got += forward([(b, [t + 5], False), (a, [t + 9], True)])
        out.append(np.concatenate([o.reshape(-1) for o in got]))
        llm.release(a), llm.release(b)
    return out


@pytest.mark.parametrize("fused", [True, False])
def test_the_engines_trusted_steps_give_the_checked_steps_bits(whole_model, fused):
    """LLM.forward_trusted (the generation engine's call: its steps come from requests add_request checked) skips
    the decoder's per-step checks, not a bit of the result: fused whole step or op by op, the same logits."""
    path, _ = whole_model("qwen3_moe", experts="int8", dense="int8")
    with cd.LLM(path) as llm:
        llm.decoder.fused = fused
        trusted, checked = run_trusted(llm)
        assert trusted.size == checked.size and np.array_equal(trusted, checked)
        with pytest.raises(cd.InvalidArgument, match="outside"):       # forward itself still checks
            llm.forward([(llm.new_sequence(), [97], False)])


def test_mla_and_budgeted_experts_take_the_op_by_op_path(whole_model, tmp_path):
    path, _ = whole_model("deepseek_v3", experts="int8", dense="int8")
    with cd.LLM(path) as llm:
        run(llm)
        assert not llm.decoder.fusing() and not llm.decoder._plans
    path, _ = whole_model("qwen3_moe", experts="int8", dense="int8")
    with cd.LLM(path) as ref:
        want = run(ref)
    blob = ref.executor.model.expert_layout(ref.executor.model.moe_layers[0]).nbytes
    with cd.LLM(path, cache_bytes=3 * blob, offload_dir=tmp_path / "off") as llm:
        got = run(llm)
        assert not any(plan for plan in llm.decoder._plans.values() if plan[0] is not None)
    assert np.array_equal(got, want)


def test_an_executor_planted_in_the_decoder_sees_every_layer(whole_model):
    """Whoever replaces the decoder's MoE executor (a meter, a recorder, a pool) gets every MoE layer's input."""
    path, _ = whole_model("qwen3_moe", experts="int8", dense="int8")
    with cd.LLM(path) as llm:
        seen = []

        class Recorder:
            def moe_forward(self, layer, x):
                seen.append(layer)
                return llm.executor.moe_forward(layer, x)
        llm.decoder.moe = Recorder()
        llm.forward([(llm.new_sequence(), ids(5, 1), False)])
        assert not llm.decoder.fusing() and seen == list(llm.executor.model.moe_layers)


@pytest.mark.parametrize("case", ["mixtral", "qwen3_moe"])
def test_expert_heat_is_counted_where_the_routing_happens_the_same_fused_or_not(whole_model, case):
    """The MoeExecutor counts the experts each token went to (jobs' heat maps) on both paths, equal to what
    MoeExecutor.route says of the same hidden states; nothing is planted in the decoder to count them."""
    if case not in CASES:
        pytest.skip(f"{case} is not a model case here")
    path, _ = whole_model(case, experts="int8", dense="int8")
    with cd.LLM(path) as fused, cd.LLM(path) as plain:
        plain.decoder.fused = False
        fused.executor.count_heat(), plain.executor.count_heat()
        run(fused), run(plain)
        heat = fused.executor.heat.report()
        assert heat == plain.executor.heat.report() and heat
        assert fused.decoder.moe is fused.executor                    # no meter in the decoder
        n_tokens = 19 + 6 + 4 + 11 + 3 * 2
        k = fused.executor.route(int(next(iter(heat))), np.zeros((1, fused.arch.hidden), np.float32))[0].shape[1]
        assert all(sum(row) == n_tokens * k for row in heat.values())
        assert fused.executor.heat.rows == n_tokens * len(heat)
