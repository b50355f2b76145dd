"""THE LIVE ORACLE for whole models: cd.LLM against transformers' AutoModelForCausalLM.

For every family (odd sizes, GQA ratios 1/3/4, explicit head_dim, sliding windows shorter than
the prompt, QK-norms, clip_qkv, dense MLP layers, MLA with yarn, gpt-oss's sinks, biased experts with
the clamped SwiGLU and router bias): f32 logits over 48 positions
within 1e-4 x max|reference|; the same for 24 decode steps through the KV cache; greedy
continuation of 24 tokens identical to model.generate(do_sample=False). int8 experts + int8 dense:
within 1e-4 of transformers running the same int8-decoded weights (the quantized paths compute
exactly what the stored weights mean), and close to the float model (cosine, top-1 agreement).
"""
import numpy as np
import pytest

import colibri_dist as cd
from model_cases import CASES

torch = pytest.importorskip("torch")
PROMPT, DECODE = 48, 24


def prompt(vocab, n=PROMPT, seed=3):
    return np.random.default_rng(seed).integers(0, vocab, n).astype(np.int64)


def reference_logits(hf, ids):
    with torch.no_grad():
        return hf(torch.from_numpy(np.asarray(ids))[None]).logits[0].float().numpy()


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def greedy(llm, ids, n):
    """Greedy decode through the KV cache: prefill, then one token per step (ties to the lowest id)."""
    seq = llm.new_sequence()
    try:
        last = llm.forward([(seq, list(ids), False)])[0][-1]
        out, steps = [], []
        for _ in range(n):
            tok = int(np.argmax(last))
            out.append(tok)
            last = llm.forward([(seq, [tok], False)])[0][-1]
            steps.append(last)
        return out, steps
    finally:
        llm.release(seq)


@pytest.mark.parametrize("case", sorted(CASES))
def test_f32_logits_match_transformers(whole_model, case):
    path, hf = whole_model(case)
    with cd.LLM(path) as llm:
        ids = prompt(llm.vocab_size)
        ref = reference_logits(hf, ids)
        got = llm.logits(ids)
        assert got.shape == ref.shape
        assert rel_err(got, ref) <= 1e-4, rel_err(got, ref)


@pytest.mark.parametrize("case", sorted(CASES))
def test_f32_decode_steps_and_greedy_match_transformers(whole_model, case):
    path, hf = whole_model(case)
    with cd.LLM(path) as llm:
        ids = prompt(llm.vocab_size)
        tokens, step_logits = greedy(llm, ids, DECODE)
        with torch.no_grad():
            x = torch.from_numpy(ids)[None]
            gen = hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=DECODE,
                              min_new_tokens=DECODE)[0, PROMPT:].tolist()
        assert tokens == gen
        full = np.concatenate([ids, tokens])
        ref = reference_logits(hf, full)[PROMPT:PROMPT + DECODE]
        got = np.stack(step_logits)
        assert rel_err(got, ref) <= 1e-4, rel_err(got, ref)


def fake_quantized(hf, scheme):
    """A copy of hf whose matrices (experts, attention, lm_head; not the embedding, routers, biases or the
    shared-expert gate, which colibri keeps in float32) hold their `scheme`-decoded values. A family whose
    fused experts are stored x @ W (gpt-oss: [E, in, out]) is quantized along its output rows, as colibri
    stores them (per-row scales: quantizing gate_up^T whole equals gate and up apart)."""
    import copy
    from colibri_dist import families
    from colibri_dist.format.quantize import dequantize, pack_matrix
    transposed = families.FAMILIES[hf.config.model_type].names.fused == "interleaved"
    q = copy.deepcopy(hf)
    with torch.no_grad():
        if q.lm_head.weight is q.model.embed_tokens.weight:     # tied: colibri encodes lm_head only
            q.lm_head.weight = torch.nn.Parameter(q.lm_head.weight.detach().clone())
        for name, p in q.named_parameters():
            if "embed_tokens" in name or name.endswith(("mlp.gate.weight", "router.weight", "_bias")) \
                    or "shared_expert_gate" in name:
                continue
            mats = [p] if p.ndim == 2 else list(p) if p.ndim == 3 else []
            for m in mats:
                m = m.T if transposed and p.ndim == 3 else m
                blob, layout = pack_matrix(m.numpy(), scheme)
                m.copy_(torch.from_numpy(dequantize(blob, layout)))
    return q


@pytest.mark.parametrize("case", sorted(CASES))
def test_int8_matches_transformers_on_the_same_int8_weights(whole_model, case):
    path, hf = whole_model(case, experts="int8", dense="int8")
    ref_model = fake_quantized(hf, "int8")
    with cd.LLM(path, w8a8=False) as llm:         # the exact-weights mode: transformers on the decoded weights
        ids = prompt(llm.vocab_size)
        got = llm.logits(ids)
    ref = reference_logits(ref_model, ids)
    assert rel_err(got, ref) <= 1e-4, rel_err(got, ref)


@pytest.mark.parametrize("case", sorted(CASES))
def test_int8_close_to_the_float_model(whole_model, case):
    # Measured on these tiny random models: cosine 0.994-0.9998 and top-1 agreement 0.875-1.0. The
    # spread comes from MoE routing flips on near-tied router logits (the exactness test above shows
    # the arithmetic is right), so the bound here is looser than the 0.999 / 0.95 asked for real models.
    path, hf = whole_model(case, experts="int8", dense="int8")
    with cd.LLM(path) as llm:
        ids = prompt(llm.vocab_size)
        got = llm.logits(ids)
    ref = reference_logits(hf, ids)
    cos = float(np.sum(got * ref) / (np.linalg.norm(got) * np.linalg.norm(ref)))
    agree = float(np.mean(got.argmax(1) == ref.argmax(1)))
    assert cos >= 0.99, cos
    assert agree >= 0.85, agree
