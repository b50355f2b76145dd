"""Automatic prefix caching: a prompt that starts with cached full KV blocks skips their prefill, and every
token, logprob and logit is bit-identical to a run without the cache (exact equality): a prefix computed
inside a longer prompt reused by a shorter one, chunked prefill, preemption, LRU eviction under a small
budget, a 16-bit cache, GQA with a sliding window and MLA. Reference counts return every block."""
import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import SamplingParams

CASES = ["mixtral", "deepseek_v3", "gpt_oss"]          # GQA + sliding window 16, MLA, sinks + window 12


def ids(n, seed, vocab=97):
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


@pytest.fixture(scope="module", params=CASES)
def case(request, whole_model):
    path, _ = whole_model(request.param, experts="int8", dense="int8")
    return path


def _key(outs):
    return [(o.error, o.token_ids, [(lp.token_id, lp.logprob, lp.top) for lp in o.logprobs or []]) for o in outs]


SHARED = ids(45, 1)                          # 2 full 16-token blocks + 13
PROMPTS = [SHARED + ids(30, 2), SHARED[:40] + ids(3, 3), SHARED[:32], SHARED[:33] + ids(1, 4), ids(20, 5)]
PARAMS = [SamplingParams(max_tokens=6, logprobs=2, ignore_eos=True),
          SamplingParams(max_tokens=6, temperature=0.9, seed=3, logprobs=2, ignore_eos=True)]


def _run_one_by_one(llm, prompts, params):
    return [llm.generate([p], params)[0] for p in prompts]


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "sampled"])
def test_cached_prefixes_give_the_same_bits(case, params):
    with cd.LLM(case, enable_prefix_caching=False) as off:
        want = _key(_run_one_by_one(off, PROMPTS, params))
        assert off.stats()["prefix_cache"] == {"enabled": False}
    with cd.LLM(case) as on:
        got = _key(_run_one_by_one(on, PROMPTS, params))
        st = on.stats()["prefix_cache"]
        # the 75-token prompt named its blocks; the 43-token one reused 2 of them (32 tokens, computed inside
        # the longer prompt), the 32-token one only 1 (its last token's block is always computed), ...
        assert st["enabled"] and st["hit_tokens"] == 0 + 32 + 16 + 32 + 0
        assert st["queried_tokens"] == sum(len(p) for p in PROMPTS)
        assert on.cache.free_blocks() == on.cache.n_blocks      # every reference returned
    assert got == want


def test_chunked_prefill_preemption_and_a_batch_with_hits(case):
    prompts = [SHARED + ids(20 + i, 10 + i) for i in range(6)]
    p = SamplingParams(max_tokens=20, temperature=0.9, seed=3, logprobs=2, ignore_eos=True)
    with cd.LLM(case, enable_prefix_caching=False) as off:
        want = _key(off.generate(prompts, p))
    with cd.LLM(case, max_num_batched_tokens=7) as on:     # every prompt in chunks of at most 7 tokens
        on.generate(prompts[:1], p)
        got = _key(on.generate(prompts, p))
        # prompts[0] finds its own 4 full blocks again, the others the 2 blocks of SHARED
        assert on.stats()["prefix_cache"]["hit_tokens"] == 64 + 5 * 32
    assert got == want
    with cd.LLM(case, kv_cache_bytes=_bytes_for(case, 10), max_seq_len=96,
                max_num_batched_tokens=7) as small:                   # 10 blocks: preempts and evicts
        small.generate(prompts[:1], p)
        steps = []
        got = _key(small.generate(prompts, p, on_step=steps.append))
        assert sum(s.preemptions for s in steps) > 0 and small.cache.prefix.evictions > 0 and small.cache.free_blocks() == small.cache.n_blocks
    assert got == want


def _bytes_for(path, n_blocks):
    with cd.LLM(path, kv_cache_bytes=1 << 20) as llm:
        return n_blocks * llm.cache.block_bytes


def test_step_model_match_then_forward_equals_the_whole_prompt(case):
    tokens = ids(50, 7)
    with cd.LLM(case, kv_cache_dtype="bf16", enable_prefix_caching=False) as off:
        whole = off.logits(tokens)
    with cd.LLM(case, kv_cache_dtype="bf16") as llm:
        first = llm.new_sequence()
        llm.forward([(first, tokens[:40], False)])          # names blocks 0 and 1
        seq = llm.new_sequence()
        assert llm.match_prefix(seq, tokens) == 32 and seq.blocks[:2] == first.blocks[:2]
        rest = llm.forward([(seq, tokens[32:], True)])[0]
        assert np.array_equal(rest, whole[32:])
        with pytest.raises(InvalidArgument, match="already holds 50 tokens"):
            llm.match_prefix(seq, tokens)
        llm.release(first)
        llm.release(seq)
        assert llm.cache.free_blocks() == llm.cache.n_blocks
        assert llm.cache.prefix.stats()["evictable_blocks"] == 3        # 16+16+16 of the 50 are full blocks


def test_a_hot_added_expert_forgets_every_cached_block(whole_model, tmp_path):
    import shutil
    src, _ = whole_model("mixtral", experts="int8", dense="int8")
    path = tmp_path / "m.colibri"
    shutil.copy(src, path)
    prompt, p = SHARED + ids(5, 8), PARAMS[0]
    with cd.LLM(path) as llm:
        llm.generate([prompt], p)
        h, eng = llm.arch.hidden, llm.executor
        inter = eng.model.expert_layout(0).inter
        rng = np.random.default_rng(0)
        w = {k: rng.standard_normal(s).astype(np.float32) for k, s in
             (("gate", (inter, h)), ("up", (inter, h)), ("down", (h, inter)))}
        eng.add_expert(0, w, np.full(h, 3.0, np.float32))
        after = _key(llm.generate([prompt], p))
        assert llm.stats()["prefix_cache"]["hit_tokens"] == 0      # the old KV was never reused
    with cd.LLM(path, enable_prefix_caching=False) as fresh:
        assert _key(fresh.generate([prompt], p)) == after


def test_switch_reset_and_bad_values(case):
    with pytest.raises(InvalidArgument, match="enable_prefix_caching must be True, False or None"):
        cd.LLM(case, enable_prefix_caching="yes")
    with cd.LLM(case) as llm:
        assert llm.prefix_caching
        llm.generate([SHARED], PARAMS[0])
        assert llm.cache.prefix.stats()["cached_blocks"] == 3      # 45 prompt + 5 generated tokens fed
        llm.reset_prefix_cache()
        assert llm.cache.prefix.stats()["cached_blocks"] == 0 and llm.cache.free_blocks() == llm.cache.n_blocks


def test_a_moe_executor_without_kv_identity_turns_caching_off_by_default(case):
    with cd.LLM(case) as inner:
        class Executor:                      # what a pool client looks like to the LLM
            def moe_forward(self, layer, x):
                return inner.executor.moe_forward(layer, x)
        with cd.LLM(case, moe=Executor()) as llm:
            assert not llm.prefix_caching
        with cd.LLM(case, moe=Executor(), enable_prefix_caching=True) as llm:
            assert llm.prefix_caching


def test_prefix_index_compares_tokens_not_only_digests():
    from colibri_dist.model import prefix_cache
    idx = prefix_cache.PrefixIndex("salt")
    d, _ = idx.lookup(idx.root, [1, 2])
    assert idx.add(5, d, idx.root, [1, 2])
    idx.by_digest[prefix_cache.block_digest(idx.root, [3, 4])] = 5          # a forged collision
    assert idx.lookup(idx.root, [3, 4])[1] is None and idx.lookup(idx.root, [1, 2])[1] == 5


def _samples(out):
    return [(c.token_ids, [(lp.token_id, lp.logprob, lp.top) for lp in c.logprobs]) for c in out.outputs]


def test_n_samples_fork_the_prompt_and_co_admitted_rows_share_a_prefix(case):
    """n > 1: sample 0 computes the prompt, the other samples fork its KV (full blocks shared, the partial
    one copied) and draw their first token from its logits; each sample equals the same seed run alone.
    Rows admitted together that share full prefix blocks compute them once (the later rows wait one step
    and match them). Bits equal the uncached, one-by-one runs; every block comes back."""
    from colibri_dist.generate.sampler import request_seed
    p = SHARED + ids(5, 9)                                        # 50 tokens: 3 full blocks + a partial one
    sp = SamplingParams(n=3, max_tokens=5, temperature=0.9, seed=4, logprobs=1, ignore_eos=True)
    rows = [SHARED + ids(5 + i, 20 + i) for i in range(3)]
    row_sp = SamplingParams(max_tokens=4, temperature=0.9, seed=2, logprobs=1, ignore_eos=True)
    with cd.LLM(case, enable_prefix_caching=False) as off:
        alone = [off.generate([p], SamplingParams(**dict(sp.to_dict(), n=1, seed=request_seed(sp, 0, 0, i))))[0]
                 for i in range(3)]
        steps = []
        forked = off.generate([p], sp, on_step=steps.append)[0]   # no prefix cache: the fork alone shares
        assert sum(s.prefill_tokens for s in steps) == len(p) and off.cache.free_blocks() == off.cache.n_blocks
        want_rows = _key(_run_one_by_one(off, rows, row_sp))
    assert _samples(forked) == [_samples(a)[0] for a in alone]
    with cd.LLM(case) as on:
        steps = []
        got_rows = _key(on.generate(rows, row_sp, on_step=steps.append))
        assert sum(s.prefill_tokens for s in steps) == sum(len(r) for r in rows) - 2 * 32   # SHARED's 2 blocks once
        assert _samples(on.generate([p], sp)[0]) == _samples(forked)
        assert on.cache.free_blocks() == on.cache.n_blocks
    assert got_rows == want_rows
