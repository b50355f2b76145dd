"""The real `openai` client against a live server: completions, chat, streaming, logprobs, n, stop strings,
and tokens/logprobs equal to LLM.generate bit for bit for the same seed, alone and with 32 clients at once."""
import asyncio

import pytest

from colibri_dist.generate import SamplingParams

from serve_helpers import start_server

openai = pytest.importorskip("openai")

PROMPTS = ["count: seven eight", "spell: c d", "week: monday", "month: march april", "count: forty-one"]


@pytest.fixture(scope="module")
def server(demo_model):
    s = start_server(demo_model, served_model_name=("demo",), max_num_seqs=16)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def _ref(llm, prompt, **kw):
    return llm.generate([prompt], SamplingParams(**{"temperature": 0.0, **kw}))[0]


def _lps(c):
    return [lp.logprob for lp in c.logprobs]


def test_models_lists_the_served_name(client):
    assert [m.id for m in client.models.list().data] == ["demo"]


def test_completion_equals_generate_greedy(client, reference_llm):
    r = client.completions.create(model="demo", prompt=PROMPTS[0], max_tokens=5, temperature=0)
    want = _ref(reference_llm, PROMPTS[0], max_tokens=5, temperature=0.0)
    assert r.choices[0].text == want.text == "nine ten eleven twelve thirteen"
    assert r.usage.prompt_tokens == len(want.prompt_token_ids) and r.usage.completion_tokens == 5
    assert r.choices[0].finish_reason == "length"


def test_sampled_tokens_and_logprobs_equal_generate(client, reference_llm):
    for seed in (1, 2, 3):
        r = client.completions.create(model="demo", prompt=PROMPTS[1], max_tokens=6, temperature=2.5, seed=seed,
                                      logprobs=2)
        want = _ref(reference_llm, PROMPTS[1], max_tokens=6, temperature=2.5, seed=seed, logprobs=2)
        assert r.choices[0].text == want.text
        assert r.choices[0].logprobs.token_logprobs == _lps(want)        # exact float equality
        tops = r.choices[0].logprobs.top_logprobs
        assert all(len(t) >= 2 for t in tops) and len(tops) == len(want.token_ids)


def test_prompt_shapes_list_of_strings_and_token_ids(client, reference_llm):
    ids = reference_llm.tokenizer.encode(PROMPTS[2]).ids
    r = client.completions.create(model="demo", prompt=[PROMPTS[0], PROMPTS[2]], max_tokens=3, temperature=0)
    r_ids = client.completions.create(model="demo", prompt=ids, max_tokens=3, temperature=0)
    r_many = client.completions.create(model="demo", prompt=[ids, ids], max_tokens=3, temperature=0)
    texts = [c.text for c in sorted(r.choices, key=lambda c: c.index)]
    assert texts == [_ref(reference_llm, p, max_tokens=3).text for p in (PROMPTS[0], PROMPTS[2])]
    assert r_ids.choices[0].text == texts[1] and [c.text for c in r_many.choices] == [texts[1]] * 2
    assert r.usage.prompt_tokens == sum(len(reference_llm.tokenizer.encode(p).ids) for p in (PROMPTS[0], PROMPTS[2]))


def test_n_samples_are_independent_choices(client):
    r = client.completions.create(model="demo", prompt=PROMPTS[3], max_tokens=4, temperature=3.0, seed=7, n=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == sum(len(c.text.split()) for c in r.choices)


def test_stop_string_ends_the_text_before_it(client, reference_llm):
    r = client.completions.create(model="demo", prompt=PROMPTS[0], max_tokens=8, temperature=0, stop=[" eleven"])
    assert r.choices[0].text == "nine ten" and r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == _ref(reference_llm, PROMPTS[0], max_tokens=8, stop=[" eleven"]).text


def test_streaming_completion_joins_to_the_full_text(client):
    chunks = list(client.completions.create(model="demo", prompt=PROMPTS[0], max_tokens=5, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == "nine ten eleven twelve thirteen"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_chat_and_chat_streaming(client, reference_llm):
    msgs = [{"role": "user", "content": "spell: c d"}]
    r = client.chat.completions.create(model="demo", messages=msgs, max_tokens=3, temperature=0,
                                       logprobs=True, top_logprobs=2)
    want = reference_llm.chat([msgs], SamplingParams(max_tokens=3, logprobs=2, temperature=0.0))[0]
    assert r.choices[0].message.content == want.text == "e f g"
    assert r.choices[0].message.role == "assistant"
    assert [t.logprob for t in r.choices[0].logprobs.content] == _lps(want)
    assert all(len(t.top_logprobs) == 2 for t in r.choices[0].logprobs.content)
    chunks = list(client.chat.completions.create(model="demo", messages=msgs, max_tokens=3, temperature=0,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "e f g"


def test_echo_with_logprobs_and_max_tokens_zero_gives_prompt_logprobs(client, reference_llm):
    r = client.completions.create(model="demo", prompt=PROMPTS[0], max_tokens=0, echo=True, logprobs=1,
                                  temperature=0)
    lp = r.choices[0].logprobs
    score = reference_llm.score([PROMPTS[0]])[0]
    assert r.choices[0].text == PROMPTS[0] and lp.token_logprobs[0] is None
    assert lp.token_logprobs[1:] == score.token_logprobs
    assert r.usage.completion_tokens == 0


def test_32_concurrent_clients_get_generate_bits(server, reference_llm):
    jobs = [(PROMPTS[i % len(PROMPTS)], 100 + i) for i in range(32)]
    want = reference_llm.generate([p for p, _ in jobs],
                                  [SamplingParams(max_tokens=6, temperature=2.0, seed=s, logprobs=1) for _, s in jobs])

    async def one(ac, prompt, seed):
        stream = await ac.completions.create(model="demo", prompt=prompt, max_tokens=6, temperature=2.0, seed=seed,
                                             logprobs=1, stream=True)
        text, lps = "", []
        async for c in stream:
            if c.choices:
                text += c.choices[0].text
                lps += c.choices[0].logprobs.token_logprobs if c.choices[0].logprobs else []
        return text, lps

    async def all_of():
        ac = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        try:
            return await asyncio.gather(*(one(ac, p, s) for p, s in jobs))
        finally:
            await ac.close()
    got = asyncio.run(all_of())
    assert [g[0] for g in got] == [w.text for w in want]
    assert [g[1] for g in got] == [_lps(w) for w in want]


def test_metrics_show_the_prefix_cache_hit_rate(server, client):
    import httpx
    words = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
    prompt = "count: " + words + " " + words.replace("one two", "seventeen eighteen")   # > 2 full KV blocks
    for _ in range(2):
        client.completions.create(model="demo", prompt=prompt, max_tokens=1, temperature=0)
    stats = server.state.backend.model_stats()[0]["prefix_cache"]
    assert stats["hit_tokens"] >= 16, stats                     # the second request reused the first's blocks
    m = httpx.get(server.url + "/metrics", timeout=30).text
    line = next(ln for ln in m.splitlines() if ln.startswith("colibri_prefix_cache_hit_rate "))
    assert float(line.split()[1]) == stats["hit_tokens"] / stats["queried_tokens"] > 0


def test_stream_chunks_are_the_bytes_of_the_envelope():
    from colibri_dist.serve import responses, sse
    chunks = sse.Chunks("text_completion", "cmpl-1", 7, 'de"mo\u00e9')
    choices = [{"index": 0, "text": "\u00fcber \"x\"", "logprobs": None, "finish_reason": None}]
    assert chunks.event(choices) == sse.event(responses.envelope("text_completion", "cmpl-1", 7, 'de"mo\u00e9', choices))
    use = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    assert chunks.event([], use) == sse.event(responses.envelope("text_completion", "cmpl-1", 7, 'de"mo\u00e9', [], use))
