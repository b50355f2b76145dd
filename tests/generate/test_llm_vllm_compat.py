"""vLLM code runs unchanged on cd.LLM (issue 31, the newcomer's path): invalid requests raise ValueError,
vLLM's LLM(...) keywords and max_logprobs, LLM.chat's keywords, include_stop_str_in_output / detokenize,
request ids unique across calls, the "Processed prompts" bar, get_tokenizer() -> a transformers tokenizer.
On the demo LLM."""
import sys
import warnings

import pytest

import colibri_dist as cd
from colibri_dist.errors import InvalidArgument
from colibri_dist.demos import llm as demo_llm

pytest.importorskip("tokenizers")
GREEDY = cd.SamplingParams(max_tokens=4, temperature=0)
PROMPT = "count: seven eight"                    # the demo model answers "nine ten eleven twelve"


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-compat")
    hf = demo_llm.write_checkpoint(str(root / "hf"), layers=2, n_experts=8)
    cd.convert(hf, str(root / "m.colibri"), progress=False)
    with cd.LLM(str(root / "m.colibri"), threads=1) as llm:
        yield llm


def _gen(llm, prompts, params=GREEDY, **kw):
    return llm.generate(prompts, params, use_tqdm=False, **kw)


# ------------------------------------------------------------------ 1. invalid requests raise (vLLM: ValueError)
def test_an_invalid_request_raises_a_value_error_naming_it(llm):
    with pytest.raises(ValueError, match="empty prompt") as info:
        _gen(llm, [PROMPT, ""])
    assert isinstance(info.value, InvalidArgument) and info.value.parameter == "prompt"
    with pytest.raises(ValueError, match="top_p") as info:
        _gen(llm, PROMPT, {"top_p": 2.0})
    assert info.value.parameter == "top_p"
    with pytest.raises(ValueError, match="roles must alternate|conversation"):
        llm.chat([[]], GREEDY, use_tqdm=False)
    assert _gen(llm, PROMPT)[0].outputs[0].text == "nine ten eleven twelve"     # the LLM goes on


def test_errors_return_keeps_the_per_request_errors_the_jobs_use(llm):
    out = _gen(llm, [PROMPT, ""], errors="return")
    assert out[0].outputs[0].text == "nine ten eleven twelve" and out[1].outputs == []
    assert "empty prompt" in str(out[1].error)
    with pytest.raises(InvalidArgument, match="errors must be one of") as info:
        _gen(llm, PROMPT, errors="ignore")
    assert info.value.parameter == "errors"


# ------------------------------------------------------------------ 2. vLLM's LLM(...) keywords
def test_vllm_constructor_keywords_have_their_cpu_meaning(llm):
    kw = dict(threads=1, tensor_parallel_size=1, gpu_memory_utilization=0.9, trust_remote_code=True,
              enforce_eager=True, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with cd.LLM(llm.path, dtype="auto", **kw) as a:
            assert a.scheduler_config.base_seed == 7
        with cd.LLM(llm.path, dtype="float32", seed=None, threads=1) as a:
            assert a.scheduler_config.base_seed == 0
    with pytest.warns(UserWarning, match="float32 on the CPU"):
        cd.LLM(llm.path, dtype="bfloat16", threads=1).close()


@pytest.mark.parametrize("kw, name, text", [
    (dict(tensor_parallel_size=2), "tensor_parallel_size", "workers="),
    (dict(tensor_parallel_size=0), "tensor_parallel_size", "positive integer"),
    (dict(dtype="int3"), "dtype", "float32"),
    (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization", "kv_cache_bytes"),
    (dict(trust_remote_code="yes"), "trust_remote_code", "True or False"),
    (dict(enforce_eager=1), "enforce_eager", "True or False"),
    (dict(seed=-1), "seed", "base seed"),
])
def test_vllm_constructor_keywords_refused_say_why(llm, kw, name, text):
    with pytest.raises(InvalidArgument, match=text) as info:
        cd.LLM(llm.path, threads=1, **kw)
    assert info.value.parameter == name and name in str(info.value)


def test_logprobs_above_max_logprobs_are_refused_naming_them(llm):
    for name in ("logprobs", "prompt_logprobs"):
        with pytest.raises(ValueError, match=f"{name}: 21 is more than this engine's max_logprobs 20") as info:
            _gen(llm, PROMPT, cd.SamplingParams(max_tokens=1, **{name: 21}))
        assert info.value.parameter == name
        out = _gen(llm, PROMPT, cd.SamplingParams(max_tokens=1, **{name: 21}), errors="return")[0]
        assert name in str(out.error)                          # the jobs' rows: that row's error
    with cd.LLM(llm.path, threads=1, max_logprobs=21) as wide:
        out = _gen(wide, PROMPT, cd.SamplingParams(max_tokens=1, logprobs=21))[0]
        assert len(out.outputs[0].logprobs[0].top) == 21
    with pytest.raises(InvalidArgument, match="max_logprobs") as info:
        cd.LLM(llm.path, threads=1, max_logprobs=-1)
    assert info.value.parameter == "max_logprobs"


# ------------------------------------------------------------------ 3. LLM.chat's keywords
TEMPLATE = ("{% for m in messages %}{{ m.content }} .{% endfor %}"
            "{% if add_generation_prompt %} count:{% endif %}")


def test_chat_takes_vllms_template_keywords(llm):
    conv = [{"role": "user", "content": PROMPT}]
    def chat(**kw):
        return llm.chat(conv, GREEDY, use_tqdm=False, chat_template=TEMPLATE, **kw)[0]
    assert chat().prompt == PROMPT + " . count:"
    assert chat(add_generation_prompt=False).prompt == PROMPT + " ."
    out = chat(add_generation_prompt=False, continue_final_message=True)
    assert out.prompt == PROMPT and out.outputs[0].text == "nine ten eleven twelve"
    with pytest.raises(ValueError, match="add_generation_prompt=False") as info:
        chat(continue_final_message=True)
    assert info.value.parameter == "continue_final_message"
    assert llm.chat(conv, GREEDY, use_tqdm=False)[0].prompt == PROMPT                 # the container's template
    kw = chat(chat_template_kwargs={"add_generation_prompt": True}, add_generation_prompt=False)
    assert kw.prompt == PROMPT + " ."                                                 # the keyword wins
    assert chat(lora_request=None, chat_template_content_format="string").prompt == PROMPT + " . count:"
    with pytest.raises(InvalidArgument, match="LoRA") as info:
        _gen(llm, PROMPT, lora_request=object())
    assert info.value.parameter == "lora_request"
    with pytest.raises(InvalidArgument, match="'auto' or 'string'") as info:
        chat(chat_template_content_format="openai")
    assert info.value.parameter == "chat_template_content_format"


# ------------------------------------------------------------------ 4. include_stop_str_in_output, detokenize
def test_include_stop_str_in_output_keeps_the_stop_string(llm):
    plain = _gen(llm, PROMPT, cd.SamplingParams(max_tokens=4, temperature=0, stop=["ten"]))[0].outputs[0]
    kept = _gen(llm, PROMPT, cd.SamplingParams(max_tokens=4, temperature=0, stop=["ten"],
                                               include_stop_str_in_output=True))[0].outputs[0]
    assert plain.text == "nine " and kept.text == "nine ten"
    assert plain.stop_reason == kept.stop_reason == "ten" and plain.token_ids == kept.token_ids


def test_detokenize_false_gives_token_ids_only(llm):
    ref = _gen(llm, PROMPT, cd.SamplingParams(max_tokens=4, temperature=0, logprobs=1))[0].outputs[0]
    out = _gen(llm, PROMPT, cd.SamplingParams(max_tokens=4, temperature=0, logprobs=1, detokenize=False))[0]
    c = out.outputs[0]
    assert c.text == "" and c.token_ids == ref.token_ids and ref.text == "nine ten eleven twelve"
    assert [lp.logprob for lp in c.logprobs] == [lp.logprob for lp in ref.logprobs]
    assert all(v.decoded_token is None for lp in c.logprobs for v in lp.values())
    with pytest.raises(InvalidArgument, match="detokenize=True") as info:
        cd.SamplingParams(stop=["x"], detokenize=False)
    assert info.value.parameter == "detokenize"
    for name in ("detokenize", "include_stop_str_in_output"):
        with pytest.raises(InvalidArgument, match=name):
            cd.SamplingParams(**{name: "yes"})


# ------------------------------------------------------------------ 5. request ids unique across calls
def test_default_request_ids_are_strings_never_reused(llm):
    a = _gen(llm, [PROMPT, PROMPT])
    b = _gen(llm, [PROMPT])
    c = llm.chat([{"role": "user", "content": PROMPT}], GREEDY, use_tqdm=False)
    ids = [o.request_id for o in a + b + c]
    assert all(isinstance(i, str) for i in ids) and len(set(ids)) == 4
    sampled = cd.SamplingParams(max_tokens=6, temperature=1.0, ignore_eos=True)      # no seed of its own
    two = ["count: one", "week: friday"]
    first, again = _gen(llm, two, sampled), _gen(llm, two, sampled)
    assert [o.request_id for o in first] != [o.request_id for o in again]
    assert [o.outputs[0].token_ids for o in first] == [o.outputs[0].token_ids for o in again]   # seeds: positions


# ------------------------------------------------------------------ 6. the "Processed prompts" bar
def test_generate_shows_vllms_progress_bar_by_default(llm, capsys):
    llm.generate([PROMPT, PROMPT], GREEDY)
    llm.chat([{"role": "user", "content": PROMPT}], GREEDY)
    err = capsys.readouterr().err
    assert err.count("Processed prompts") >= 2 and "2/2" in err and "1/1" in err
    _gen(llm, [PROMPT])
    llm.chat([{"role": "user", "content": PROMPT}], GREEDY, use_tqdm=False)
    assert capsys.readouterr() == ("", "")


# ------------------------------------------------------------------ 7. get_tokenizer
def test_get_tokenizer_is_a_transformers_tokenizer(llm):
    transformers = pytest.importorskip("transformers")
    tok = llm.get_tokenizer()
    assert isinstance(tok, transformers.PreTrainedTokenizerFast)
    assert tok.encode(PROMPT, add_special_tokens=False) == llm.tokenizer.encode(PROMPT, add_special_tokens=False).ids
    assert tok.eos_token_id in llm.eos_token_ids and tok.model_max_length == llm.max_seq_len
    assert tok.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False) == PROMPT


def test_get_tokenizer_without_transformers_is_the_tokenizers_one(llm, monkeypatch):
    monkeypatch.setattr(llm, "_hf_tokenizer", None)
    monkeypatch.setitem(sys.modules, "transformers", None)        # import transformers -> ImportError
    assert llm.get_tokenizer() is llm.tokenizer
    monkeypatch.setattr(llm, "_hf_tokenizer", None)
