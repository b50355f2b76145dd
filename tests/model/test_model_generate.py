"""LLM.generate / score / chat on real converted models: greedy tokens identical to transformers'
generate, score log-probabilities within 1e-4, and every request's tokens and logprobs bit-identical
whatever else runs with it (batch, step budget, chunking, threads, KV budget with preemption)."""
import json

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.generate import SamplingParams
from model_cases import CASES, write_case

torch = pytest.importorskip("torch")


def prompt(n, seed, vocab=97):
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


@pytest.mark.parametrize("case", sorted(CASES))
def test_greedy_generate_matches_transformers(whole_model, case):
    path, hf = whole_model(case)
    prompts = [prompt(n, 20 + n) for n in (5, 17, 30)]
    with cd.LLM(path) as llm:
        outs = llm.generate(prompts, SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))
    for p, out in zip(prompts, outs):
        x = torch.tensor([p])
        with torch.no_grad():
            ref = hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=12,
                              min_new_tokens=12)[0, len(p):].tolist()
        assert out.error is None and out.token_ids == ref and out.finish_reason == "length"


@pytest.mark.parametrize("case", sorted(CASES))
def test_score_matches_transformers(whole_model, case):
    path, hf = whole_model(case)
    p = prompt(33, 5)
    with cd.LLM(path) as llm:
        s = llm.score([p])[0]
    with torch.no_grad():
        logp = torch.log_softmax(hf(torch.tensor([p])).logits[0].double(), -1).numpy()
    ref = [logp[i - 1, p[i]] for i in range(1, len(p))]
    assert s.num_tokens == len(p) and len(s.token_logprobs) == len(p) - 1
    assert np.abs(np.array(s.token_logprobs) - ref).max() <= 1e-4
    assert abs(s.total_logprob - sum(ref)) <= 1e-3


GREEDY = SamplingParams(max_tokens=10, logprobs=2, temperature=0, ignore_eos=True)
SAMPLED = SamplingParams(max_tokens=10, temperature=0.8, top_p=0.9, top_k=20, seed=1234, logprobs=3,
                         ignore_eos=True)


def _key(c):
    return c.token_ids, [(lp.token_id, lp.logprob, lp.top) for lp in c.logprobs]


@pytest.fixture(scope="module")
def target_alone(whole_model):
    path, _ = whole_model("qwen2_moe", experts="int8", dense="int8")
    with cd.LLM(path) as llm:
        greedy, sampled = llm.generate([prompt(19, 1)] * 2, [SamplingParams(max_tokens=10, logprobs=2, temperature=0,
                                                                           ignore_eos=True), SAMPLED])
    return path, _key(greedy), _key(sampled)


@pytest.mark.parametrize("others", [1, 7, 40])
@pytest.mark.parametrize("budget", [dict(), dict(max_num_batched_tokens=16), dict(max_num_seqs=3),
                                    dict(threads=1), dict(kv_cache_bytes=24 * 16 * 3 * 2 * 2 * 8 * 4)])
def test_request_is_the_same_whatever_else_runs(target_alone, others, budget):
    path, greedy, sampled = target_alone
    rng = np.random.default_rng(others)
    mix = [prompt(int(rng.integers(1, 40)), 100 + i) for i in range(others)]
    params = [SamplingParams(max_tokens=int(rng.integers(1, 12)), temperature=float(rng.choice([0.0, 1.0])),
                             seed=int(i), ignore_eos=True) for i in range(others)]
    with cd.LLM(path, **budget) as llm:
        outs = llm.generate(mix[:others // 2] + [prompt(19, 1)] + mix[others // 2:] + [prompt(19, 1)],
                            params[:others // 2] + [GREEDY]
                            + params[others // 2:] + [SAMPLED])
    assert _key(outs[others // 2]) == greedy
    assert _key(outs[-1]) == sampled


def test_same_seed_same_prompt_same_tokens(target_alone):
    path, _, sampled = target_alone
    with cd.LLM(path) as llm:
        a, b = llm.generate([prompt(19, 1), prompt(19, 1)], SAMPLED)
    assert _key(a) == _key(b) == sampled


@pytest.fixture(scope="module")
def with_tokenizer(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    src = tmp_path_factory.mktemp("tok-src")
    write_case("qwen3_moe", src)
    words = ["<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(94)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(str(src / "tokenizer.json"))
    template = ("{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
                "{% if add_generation_prompt %}w3{% endif %}")
    (src / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, "eos_token": "</s>"}))
    (src / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    dst = tmp_path_factory.mktemp("tok") / "m.colibri"
    cd.convert(src, dst, experts="f32", progress=False)
    return dst


def test_text_prompts_chat_and_eos_from_the_container(with_tokenizer):
    with cd.LLM(with_tokenizer) as llm:
        assert llm.tokenizer is not None and llm.eos_token_ids == (1,)
        text = llm.generate("w2 w3 w4", SamplingParams(max_tokens=6, ignore_eos=True))[0]
        ids = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=6, ignore_eos=True))[0]
        assert text.prompt_token_ids == [5, 6, 7] and text.token_ids == ids.token_ids
        assert text.text == llm.tokenizer.decode(text.token_ids)
        conv = [{"role": "w10", "content": "w11 w12"}, {"role": "w13", "content": "w14"}]
        chat = llm.chat(conv, SamplingParams(max_tokens=4, ignore_eos=True))[0]
        rendered = [13, 14, 15, 16, 17, 6]       # "w10 w11 w12 w13 w14 w3": word w<i> is id i + 3
        direct = llm.generate([rendered], SamplingParams(max_tokens=4, ignore_eos=True))[0]
        assert chat.prompt_token_ids == rendered and chat.token_ids == direct.token_ids
