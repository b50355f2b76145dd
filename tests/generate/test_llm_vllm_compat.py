"""vLLM code runs unchanged on cd.LLM (issue 31, the newcomer's path): include_stop_str_in_output /
detokenize. On the demo LLM."""
import pytest

import colibri_dist as cd
from colibri_dist.errors import InvalidArgument
from colibri_dist.jobs.demos import llm as demo_llm

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
    return llm.generate(prompts, params, **kw)


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
