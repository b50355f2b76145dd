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


def test_joining_a_running_batch_of_63_and_aborted_neighbours_keep_the_bits(target_alone):
    """The target joins 63 running requests after their 3rd step; neighbours are aborted mid-way."""
    path, greedy, sampled = target_alone
    rng = np.random.default_rng(63)
    with cd.LLM(path, max_num_batched_tokens=128) as llm:
        eng = llm.llm_engine
        for i in range(63):
            eng.add_request(f"o{i}", prompt(int(rng.integers(1, 30)), 200 + i),
                            SamplingParams(max_tokens=int(rng.integers(2, 12)), temperature=float(i % 2), seed=i,
                                           ignore_eos=True))
        done, step = {}, 0
        while eng.has_unfinished():
            step += 1
            if step == 3:
                eng.add_request("greedy", prompt(19, 1), GREEDY)
                eng.add_request("sampled", prompt(19, 1), SAMPLED)
            if step in (4, 6):
                for i in range(step, 63, 9):
                    eng.abort(f"o{i}")
            for out in eng.step():
                if out.finished:
                    done[out.request_id] = out
        assert llm.cache.used_blocks() == 0
    assert _key(done["greedy"]) == greedy and _key(done["sampled"]) == sampled
    assert sum(o.finish_reason == "abort" for o in done.values()) >= 6 and len(done) == 65


@pytest.fixture(scope="module")
def with_defaults(tmp_path_factory):
    """A container whose generation_config.json carries sampling defaults (vLLM's generation_config="auto")."""
    src = tmp_path_factory.mktemp("gc-src")
    write_case("olmoe", src)
    (src / "generation_config.json").write_text(json.dumps({"temperature": 0.0, "max_new_tokens": 5,
                                                            "repetition_penalty": 1.5}))
    dst = tmp_path_factory.mktemp("gc") / "m.colibri"
    cd.convert(src, dst, experts="f32", progress=False)
    return dst


def test_generation_config_defaults_apply_when_the_caller_sets_nothing(with_defaults):
    p = prompt(11, 4)
    with cd.LLM(model=with_defaults, max_model_len=64, seed=3) as llm:
        assert llm.max_seq_len == 64 and llm.get_tokenizer() is llm.tokenizer
        d = llm.get_default_sampling_params()
        assert (d.temperature, d.max_tokens, d.repetition_penalty) == (0.0, 5, 1.5)
        none, as_dict = llm.generate([p])[0], llm.generate([p], {"max_tokens": 7})[0]
        want = llm.generate([p], SamplingParams(temperature=0.0, max_tokens=5, repetition_penalty=1.5))[0]
        explicit = llm.generate([p], SamplingParams())[0]           # an explicit object is used as is (vLLM)
        long = llm.generate([p], SamplingParams(temperature=0.0, max_tokens=7, repetition_penalty=1.5))[0]
    assert none.token_ids == want.token_ids and len(none.token_ids) == 5
    assert as_dict.token_ids == long.token_ids and len(explicit.token_ids) == 16
    with pytest.raises(cd.errors.InvalidArgument, match="max_model_len 64 and max_seq_len 32 disagree"):
        cd.LLM(with_defaults, max_model_len=64, max_seq_len=32)


def test_vllm_code_runs_unchanged(with_tokenizer):
    from colibri_dist.generate import CompletionOutput, RequestOutput
    llm = cd.LLM(model=str(with_tokenizer), seed=0)
    try:
        outs = llm.generate(["w2 w3 w4", {"prompt_token_ids": [5, 6]}],
                            SamplingParams(temperature=0, max_tokens=4, logprobs=2, ignore_eos=True), use_tqdm=True)
        for o in outs:
            assert isinstance(o, RequestOutput) and isinstance(o.outputs[0], CompletionOutput)
            c = o.outputs[0]
            assert c.text == llm.get_tokenizer().decode(c.token_ids) and len(c.token_ids) == 4
            assert c.finish_reason == "length" and c.stop_reason is None and c.index == 0
            assert [len(pos) for pos in c.logprobs] == [2] * 4          # chosen (= top 1, greedy) and top 2
            assert all(pos[t].rank == 1 and pos[t].logprob == max(v.logprob for v in pos.values())
                       for pos, t in zip(c.logprobs, c.token_ids))
            assert c.cumulative_logprob == sum(pos[t].logprob for pos, t in zip(c.logprobs, c.token_ids))
        assert outs[0].prompt == "w2 w3 w4" and outs[0].prompt_token_ids == [5, 6, 7] and outs[1].prompt is None
        assert outs[0].prompt_logprobs is None and outs[0].finished and outs[0].metrics.latency >= 0
        stopped = llm.generate("w2 w3 w4", SamplingParams(temperature=0, max_tokens=8, ignore_eos=True,
                                                          stop=outs[0].outputs[0].text.split()[1]))[0]
        assert stopped.outputs[0].finish_reason == "stop" and stopped.outputs[0].stop_reason is not None
    finally:
        llm.close()
