"""Every matrix in 4 (or 6) bits (`--dense int4-g32|int4-g64|int6-g64`) and a separate LM-head encoding
(int8, int6-g64) through the whole model: within 1e-4 of transformers running the same decoded weights, and
bit-identical whatever the thread count, batch, chunking and SIMD level."""
import copy

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist import native
from colibri_dist.generate import SamplingParams
from test_model_oracle import fake_quantized, prompt, reference_logits, rel_err

torch = pytest.importorskip("torch")
# GQA + sliding window in int4-g32; MLA + dense first layer + shared expert in int4-g64 and in int6-g64
CASES = [("mixtral", "int4-g32"), ("deepseek_v3", "int4-g64"), ("deepseek_v3", "int6-g64")]


def _with_head(hf, scheme):
    """A copy of hf whose lm_head holds its `scheme`-decoded values."""
    from colibri_dist.format.quantize import dequantize, pack_matrix
    q = copy.deepcopy(hf)
    with torch.no_grad():
        w = q.lm_head.weight.detach().clone().numpy()
        q.lm_head.weight = torch.nn.Parameter(torch.from_numpy(dequantize(*pack_matrix(w, scheme))))
    return q


@pytest.mark.parametrize("case,scheme", CASES)
def test_int4_everywhere_matches_transformers_on_the_same_weights(whole_model, case, scheme):
    path, hf = whole_model(case, experts=scheme, dense=scheme)
    with cd.LLM(path, w8a8=False) as llm:         # the exact-weights mode: transformers on the decoded weights
        ids = prompt(llm.vocab_size)
        got = llm.logits(ids)
    ref = reference_logits(fake_quantized(hf, scheme), ids)
    assert rel_err(got, ref) <= 1e-4, rel_err(got, ref)


@pytest.mark.parametrize("case,head", [("mixtral", "int8"), ("mixtral", "int6-g64")])
def test_lm_head_in_its_own_scheme(whole_model, case, head):
    path, hf = whole_model(case, experts="int4-g64", dense="int4-g64", lm_head=head)
    with cd.LLM(path, w8a8=False) as llm:
        ids = prompt(llm.vocab_size)
        got = llm.logits(ids)
    four_bit = fake_quantized(hf, "int4-g64")
    four_bit.lm_head.weight = torch.nn.Parameter(hf.lm_head.weight.detach().clone())
    ref = reference_logits(_with_head(four_bit, head), ids)
    assert rel_err(got, ref) <= 1e-4, rel_err(got, ref)
    ids = ids.tolist()
    with cd.LLM(path) as llm:                    # the default mode: the head through w8a8 / w6a8
        alone = llm.logits(ids)
        assert np.array_equal(llm.logits_batch([ids[:7], ids])[1], alone)
        greedy = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
        outs = llm.generate([ids[:7], ids], greedy)
        assert all(o.error is None and len(o.token_ids) == 6 for o in outs)
        assert outs[1].token_ids == llm.generate([ids], greedy)[0].token_ids


@pytest.mark.parametrize("case,scheme", CASES)
def test_int4_dense_is_invariant_to_threads_batch_chunks_and_simd(whole_model, case, scheme):
    path, _ = whole_model(case, experts=scheme, dense=scheme)
    rng = np.random.default_rng(5)
    target, other = rng.integers(0, 97, 21).tolist(), rng.integers(0, 97, 70).tolist()
    with cd.LLM(path, threads=1) as llm:
        ref = llm.logits(target)
    with cd.LLM(path, threads=2) as llm:
        assert np.array_equal(llm.logits(target), ref)
        assert np.array_equal(llm.logits_batch([other, target])[1], ref)
        seq = llm.new_sequence()
        rows = [llm.forward([(seq, target[:13], True)])[0], llm.forward([(seq, target[13:], True)])[0]]
        llm.release(seq)
        assert np.array_equal(np.concatenate(rows), ref)
        for level, missing in native.simd_levels().items():
            if missing is None:
                with native.simd_force(level):
                    assert np.array_equal(llm.logits(target), ref), level
