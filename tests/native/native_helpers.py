"""Shared builders for the native tests: random experts, numpy FFN reference, tiny transformers MoE blocks."""
import numpy as np
import pytest

from colibri_dist.format.quantize import dequantize, pack_expert
from colibri_dist.native import Gating, Runtime, expert_view, simd_force, simd_levels

SCHEMES = ["f32", "f16", "bf16", "int8", "int8-g32", "int8-g64", "int8-g128", "int8-minmax", "int4-g32", "int4-g64",
           "int6-g64", "q8_0"]


def simd_params():
    """Every SIMD level as a pytest param; a level this CPU/OS lacks is skipped naming the missing flags."""
    return [pytest.param(name, id=name, marks=pytest.mark.skipif(
        missing is not None, reason=f"simd level {name} skipped: this CPU/OS lacks {missing}"))
        for name, missing in simd_levels().items()]


AVAILABLE_LEVELS = [name for name, missing in simd_levels().items() if missing is None]


def w8a8_runtimes():
    """A module fixture's runtimes: the w8a8 switch on at 1, 2 and 3 threads, and "plain" (off, 2 threads);
    closed after the module (use: `yield from w8a8_runtimes()`)."""
    r = {t: Runtime(threads=t, w8a8=True) for t in (1, 2, 3)}
    r["plain"] = Runtime(threads=2)
    yield r
    for v in r.values():
        v.close()


def assert_scalar_equals(rts, x, view, ref):
    """The scalar kernel (1 thread) on the first 1, 3, 32 and 33 rows of x gives ref's bits; ref is finite."""
    with simd_force("scalar"):
        for n in (1, 3, 32, 33):
            got = rts[1].matmul(np.ascontiguousarray(x[:n]), view)
            assert np.array_equal(got.view(np.uint32), ref[:n].view(np.uint32)), n
    assert np.isfinite(ref).all()


def assert_dense_equals(rts, level, x, view, ref, tokens):
    """At SIMD level `level`, the w8a8 runtimes' matmul of x [n, cols] (3 threads, then 2 threads on the first `n` of
    every count in `tokens`, then 1 thread on tokens 0, 9 and 32 alone) equals ref bit for bit."""
    with simd_force(level):
        assert np.array_equal(rts[3].matmul(x, view), ref), level
        for n in tokens:
            assert np.array_equal(rts[2].matmul(np.ascontiguousarray(x[:n]), view), ref[:n]), (level, n)
        for t in (0, 9, 32):
            assert np.array_equal(rts[1].matmul(np.ascontiguousarray(x[t:t + 1]), view)[0], ref[t]), (level, t)


def assert_experts_equal(rts, x, view, slack=None):
    """The scalar kernel's expert_forward of x [33, hidden] with the w8a8 switch on is finite and differs from the
    switched-off one (within `slack` of its largest output when given); on every available level the w8a8 runtimes
    (1-3 threads, the first n of several counts, a row subset with a repeat) give its bits, the switched-off runtime
    the switched-off bits."""
    with simd_force("scalar"):
        ref = rts[1].expert_forward(x, view)
        plain = rts["plain"].expert_forward(x, view)
    assert np.isfinite(ref).all() and not np.array_equal(plain, ref)      # the switch changes the arithmetic
    if slack is not None:
        assert np.abs(plain - ref).max() <= slack * np.abs(plain).max()
    for level in AVAILABLE_LEVELS:
        with simd_force(level):
            for t in (1, 2, 3):
                assert np.array_equal(rts[t].expert_forward(x, view), ref), (level, t)
            for n in (1, 2, 3, 5, 16, 17, 32):
                assert np.array_equal(rts[2].expert_forward(np.ascontiguousarray(x[:n]), view), ref[:n]), (level, n)
            rows = np.array([20, 3, 3, 7, 0, 32])
            assert np.array_equal(rts[3].expert_forward(x, view, rows=rows), ref[rows]), level
            assert np.array_equal(rts["plain"].expert_forward(x, view), plain), level


def rand_expert(rng, hidden, inter, scale=0.2):
    g = (rng.standard_normal((inter, hidden)) * scale).astype(np.float32)
    u = (rng.standard_normal((inter, hidden)) * scale).astype(np.float32)
    d = (rng.standard_normal((hidden, inter)) * scale).astype(np.float32)
    return g, u, d


def view_of(weights, scheme):
    blob, layout = pack_expert(*weights, scheme)
    return expert_view(blob, layout)


def decoded(view):
    return [dequantize(view.buffer, getattr(view.layout, n)).astype(np.float64) for n in ("gate", "up", "down")]


def ffn_ref(x, g, u, d):
    """float64 SwiGLU reference on (already decoded) weights."""
    x = np.asarray(x, np.float64)
    a = x @ np.asarray(g, np.float64).T
    h = a / (1.0 + np.exp(-a)) * (x @ np.asarray(u, np.float64).T)
    return h @ np.asarray(d, np.float64).T


def cosine(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def random_layer(rng, hidden=64, inter=32, n_experts=8, top_k=2, kind="softmax_topk_norm", shared=False,
                 scheme="f32", **gating_kw):
    """Dict with router, gating, expert views, optional shared view + gate (for invariance tests)."""
    gating = Gating(kind, n_experts, top_k, **gating_kw)
    layer = {
        "gating": gating,
        "router": (rng.standard_normal((n_experts, hidden)) * 0.5).astype(np.float32),
        "experts": [view_of(rand_expert(rng, hidden, inter), scheme) for _ in range(n_experts)],
        "bias": (rng.standard_normal(n_experts) * 0.1).astype(np.float32) if kind == "sigmoid_group" else None,
    }
    if shared:
        layer["shared"] = view_of(rand_expert(rng, hidden, inter + 8), scheme)
        layer["shared_gate"] = (rng.standard_normal(hidden) * 0.3).astype(np.float32)
    return layer


# ---- transformers blocks ------------------------------------------------------------
def hf_block(family, seed=0, hidden=48, inter=24, n_experts=8, top_k=2):
    """(torch block, spec) with random weights; spec describes gating/shared for the native side."""
    import torch
    torch.manual_seed(seed)
    if family == "mixtral":
        from transformers.models.mixtral.configuration_mixtral import MixtralConfig
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
        block = MixtralSparseMoeBlock(MixtralConfig(hidden_size=hidden, intermediate_size=inter,
                                                    num_local_experts=n_experts, num_experts_per_tok=top_k))
        gating = Gating("softmax_topk_norm", n_experts, top_k)
    elif family in ("qwen2_moe", "qwen3_moe"):
        norm = family == "qwen3_moe"
        if family == "qwen2_moe":
            from transformers.models.qwen2_moe.configuration_qwen2_moe import Qwen2MoeConfig as C
            from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock as B
            cfg = C(hidden_size=hidden, moe_intermediate_size=inter, shared_expert_intermediate_size=inter + 16,
                    num_experts=n_experts, num_experts_per_tok=top_k, norm_topk_prob=norm)
        else:
            from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig as C
            from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock as B
            cfg = C(hidden_size=hidden, moe_intermediate_size=inter, num_experts=n_experts,
                    num_experts_per_tok=top_k, norm_topk_prob=norm)
        block = B(cfg)
        gating = Gating("softmax_topk_norm" if norm else "softmax_topk", n_experts, top_k)
    elif family == "olmoe":
        from transformers.models.olmoe.configuration_olmoe import OlmoeConfig
        from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock
        block = OlmoeSparseMoeBlock(OlmoeConfig(hidden_size=hidden, intermediate_size=inter,
                                                num_experts=n_experts, num_experts_per_tok=top_k))
        gating = Gating("softmax_topk", n_experts, top_k)
    elif family == "deepseek_v3":
        from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
        cfg = DeepseekV3Config(hidden_size=hidden, moe_intermediate_size=inter, n_routed_experts=16,
                               num_experts_per_tok=4, n_group=4, topk_group=2, n_shared_experts=2,
                               routed_scaling_factor=2.5, norm_topk_prob=True)
        block = DeepseekV3MoE(cfg)
        gating = Gating("sigmoid_group", 16, 4, n_group=4, topk_group=2, norm_topk_prob=True,
                        routed_scaling_factor=2.5)
    else:
        raise ValueError(family)
    with torch.no_grad():
        for _, p in block.named_parameters():
            p.normal_(0.0, 0.25)
        if family == "deepseek_v3":
            block.gate.e_score_correction_bias.copy_(torch.randn(16) * 0.2)
    return block.eval(), gating


def hf_weights(block, family):
    """Experts as [(gate, up, down)], router, bias, shared (g, u, d) or None, shared gate or None."""
    t = lambda p: p.detach().float().numpy().copy()
    gu, dn = t(block.experts.gate_up_proj), t(block.experts.down_proj)
    inter = gu.shape[1] // 2
    experts = [(gu[e, :inter], gu[e, inter:], dn[e]) for e in range(gu.shape[0])]  # chunk(2): gate first
    shared = shared_gate = bias = None
    mlp = getattr(block, "shared_expert", None) or getattr(block, "shared_experts", None)
    if mlp is not None:
        shared = (t(mlp.gate_proj.weight), t(mlp.up_proj.weight), t(mlp.down_proj.weight))
    if getattr(block, "shared_expert_gate", None) is not None:
        shared_gate = t(block.shared_expert_gate.weight)[0]
    if family == "deepseek_v3":
        bias = t(block.gate.e_score_correction_bias)
    return experts, t(block.gate.weight), bias, shared, shared_gate


def set_hf_weights(block, experts, shared):
    """Load (decoded) weights back into the torch block."""
    import torch
    with torch.no_grad():
        inter = experts[0][0].shape[0]
        for e, (g, u, d) in enumerate(experts):
            block.experts.gate_up_proj[e, :inter] = torch.from_numpy(np.asarray(g, np.float32))
            block.experts.gate_up_proj[e, inter:] = torch.from_numpy(np.asarray(u, np.float32))
            block.experts.down_proj[e] = torch.from_numpy(np.asarray(d, np.float32))
        mlp = getattr(block, "shared_expert", None) or getattr(block, "shared_experts", None)
        if shared is not None:
            for p, w in zip((mlp.gate_proj, mlp.up_proj, mlp.down_proj), shared):
                p.weight.copy_(torch.from_numpy(np.asarray(w, np.float32)))
