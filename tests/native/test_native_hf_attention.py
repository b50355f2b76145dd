"""The whole-model ops composed into transformers' attention layers: LlamaAttention (GQA, biases, RoPE) and
DeepseekV3Attention (MLA in the absorbed form: latent cache, per-head W_kb / W_vb through matmul_heads,
interleaved RoPE), prompt then decode steps through the paged cache, vs the eager torch forward."""
import numpy as np
import pytest
import torch

from colibri_dist.native import AttnSpec, Runtime, kv_write, matrix_from_array, rmsnorm, rope_apply


@pytest.fixture(scope="module")
def rt():
    with Runtime(threads=2) as r:
        yield r


def _causal(n):
    return torch.full((1, 1, n, n), float("-inf")).triu(1)


def _np(t):
    return t.detach().numpy().astype(np.float32).copy()


def _lin(layer):
    return matrix_from_array(_np(layer.weight)), None if layer.bias is None else _np(layer.bias)


def _steps(rt, spec, n, prompt, write, attend):
    """Prompt of `prompt` tokens in one call, the rest one decode step at a time -> concatenated outputs."""
    outs, table = [], [np.arange(n // spec.block_size + 1, dtype=np.int32)]
    for a, b in [(0, prompt)] + [(t, t + 1) for t in range(prompt, n)]:
        write(a, b, table)
        outs.append(attend(a, b, table))
    return np.concatenate(outs)


def test_llama_attention(rt):
    from transformers.models.llama.configuration_llama import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      attention_bias=True, max_position_embeddings=256)
    cfg._attn_implementation = "eager"
    attn, rot = LlamaAttention(cfg, 0).eval(), LlamaRotaryEmbedding(cfg)
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.2)
    n, prompt = 11, 7
    x = torch.randn(1, n, 64)
    with torch.no_grad():
        ref = attn(x, rot(x, torch.arange(n)[None]), _causal(n))[0][0].numpy()

    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (_lin(getattr(attn, f"{c}_proj")) for c in "qkvo")
    spec = AttnSpec(4, 2, 16, 16, 16, block_size=4, scale=attn.scaling)
    inv_freq, factor = _np(rot.inv_freq), float(rot.attention_scaling)
    kc = np.zeros((4, 2, 4, 16), np.float32)
    vc = np.zeros_like(kc)
    xs = x[0].numpy()
    q, k, v = (y.reshape(n, -1, 16) for y in rt.matmul_many(xs, [wq, wk, wv], [bq, bk, bv]))
    pos = np.arange(n)
    rope_apply(q, pos, 16, inv_freq, factor)
    rope_apply(k, pos, 16, inv_freq, factor)

    def write(a, b, table):
        kv_write(spec, kc, vc, [0, b - a], [a], table, k[a:b].copy(), v[a:b].copy())

    def attend(a, b, table):
        return rt.attention(spec, kc, vc, [0, b - a], [a], table, q[a:b].copy())

    out = _steps(rt, spec, n, prompt, write, attend)
    y = rt.matmul(out.reshape(n, -1), wo, bo)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=2e-5)


def _mla_weights(attn, H, nope, vd, lora):
    """Per-head absorbed matrices: q_nope . (W_k c) = (W_k^T q_nope) . c; out = W_v (p . c)."""
    kvb = _np(attn.kv_b_proj.weight).reshape(H, nope + vd, lora)
    wk_t = [matrix_from_array(kvb[h, :nope].T) for h in range(H)]        # [lora, nope]
    wv = [matrix_from_array(kvb[h, nope:]) for h in range(H)]             # [vd, lora]
    return wk_t, wv


@pytest.mark.parametrize("q_lora", [None, 24])
def test_deepseek_v3_mla_absorbed(rt, q_lora):
    from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding
    torch.manual_seed(1)
    H, nope, rope, vd, lora = 4, 16, 8, 12, 32
    cfg = DeepseekV3Config(hidden_size=64, num_attention_heads=H, num_key_value_heads=H, q_lora_rank=q_lora,
                           kv_lora_rank=lora, qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=vd,
                           rope_interleave=True, max_position_embeddings=256)
    cfg._attn_implementation = "eager"
    attn, rot = DeepseekV3Attention(cfg, 0).eval(), DeepseekV3RotaryEmbedding(cfg)
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.2)
    n, prompt = 10, 6
    x = torch.randn(1, n, 64)
    with torch.no_grad():
        ref = attn(x, rot(x, torch.arange(n)[None]), _causal(n))[0][0].numpy()

    xs, eps = x[0].numpy(), cfg.rms_norm_eps
    if q_lora is None:
        qs = rt.matmul(xs, _lin(attn.q_proj)[0])
    else:
        qa = rmsnorm(rt.matmul(xs, _lin(attn.q_a_proj)[0]), _np(attn.q_a_layernorm.weight), eps)
        qs = rt.matmul(qa, _lin(attn.q_b_proj)[0])
    qs = qs.reshape(n, H, nope + rope)
    ckv = rt.matmul(xs, _lin(attn.kv_a_proj_with_mqa)[0])                 # [n, lora + rope]
    latent = np.empty((n, 1, lora + rope), np.float32)                      # cache rows: [c_kv | k_pe]
    latent[:, 0, :lora] = rmsnorm(np.ascontiguousarray(ckv[:, :lora]), _np(attn.kv_a_layernorm.weight), eps)
    latent[:, 0, lora:] = ckv[:, lora:]
    pos = np.arange(n)
    inv_freq, factor = _np(rot.inv_freq), float(rot.attention_scaling)
    rope_apply(qs, pos, rope, inv_freq, factor, interleaved=True, offset=nope)
    rope_apply(latent, pos, rope, inv_freq, factor, interleaved=True, offset=lora)
    wk_t, wv = _mla_weights(attn, H, nope, vd, lora)
    q_abs = np.empty((n, H, lora + rope), np.float32)
    q_abs[..., :lora] = rt.matmul_heads(qs, wk_t, H, nope)
    q_abs[..., lora:] = qs[..., nope:]
    spec = AttnSpec(H, 1, lora + rope, lora, lora + rope, block_size=4, cache_dtype="f32", scale=attn.scaling)
    cache = np.zeros((4, 1, 4, lora + rope), np.float32)

    def write(a, b, table):
        kv_write(spec, cache, None, [0, b - a], [a], table, latent[a:b].copy())

    def attend(a, b, table):
        return rt.attention(spec, cache, cache, [0, b - a], [a], table, q_abs[a:b].copy())

    out_lat = _steps(rt, spec, n, prompt, write, attend)                    # [n, H, lora]
    heads = rt.matmul_heads(out_lat, wv, H, lora)                            # [n, H, vd]
    y = rt.matmul(heads.reshape(n, H * vd), _lin(attn.o_proj)[0])
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=5e-5)


def _sliding_causal(n, window):
    """transformers' sliding-window causal mask: key j visible from i iff i - window < j <= i."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return torch.where((j <= i) & (j > i - window), 0.0, float("-inf"))[None, None]


@pytest.mark.parametrize("window", [0, 5])
def test_gpt_oss_attention_with_sinks(rt, window):
    """GptOssAttention: q/k/v/o biases, GQA, yarn rope, per-head sinks, a sliding window shorter than the
    sequence; prompt then decode steps through the paged cache with the sinks passed to the attention."""
    from transformers.models.gpt_oss.configuration_gpt_oss import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding
    torch.manual_seed(2)
    layer_type = "sliding_attention" if window else "full_attention"
    cfg = GptOssConfig(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=8,
                       num_hidden_layers=1, layer_types=[layer_type], sliding_window=window or 128,
                       max_position_embeddings=256, rope_parameters={
                           "rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0,
                           "truncate": False, "original_max_position_embeddings": 16, "rope_theta": 150000.0})
    cfg._attn_implementation = "eager"
    attn, rot = GptOssAttention(cfg, 0).eval(), GptOssRotaryEmbedding(cfg)
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.3)
    with torch.no_grad():
        attn.sinks.copy_(torch.linspace(-2.0, 3.0, 6))
    n, prompt, H, hd = 13, 8, 6, 8
    x = torch.randn(1, n, 48)
    mask = _sliding_causal(n, window) if window else _causal(n)
    with torch.no_grad():
        ref = attn(x, rot(x, torch.arange(n)[None]), mask)[0][0].numpy()

    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (_lin(getattr(attn, f"{c}_proj")) for c in "qkvo")
    spec = AttnSpec(H, 2, hd, hd, hd, block_size=4, window=window, scale=attn.scaling)
    kc = np.zeros((4, 2, 4, hd), np.float32)
    vc = np.zeros_like(kc)
    q, k, v = (y.reshape(n, -1, hd) for y in rt.matmul_many(x[0].numpy(), [wq, wk, wv], [bq, bk, bv]))
    for t in (q, k):
        rope_apply(t, np.arange(n), hd, _np(rot.inv_freq), float(rot.attention_scaling))
    sinks = _np(attn.sinks)

    def write(a, b, table):
        kv_write(spec, kc, vc, [0, b - a], [a], table, k[a:b].copy(), v[a:b].copy())

    def attend(a, b, table):
        return rt.attention(spec, kc, vc, [0, b - a], [a], table, q[a:b].copy(), sinks=sinks)

    out = _steps(rt, spec, n, prompt, write, attend)
    y = rt.matmul(out.reshape(n, -1), wo, bo)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=2e-5)
