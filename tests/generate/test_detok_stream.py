"""Incremental detokenization, streaming events and stop strings against real (locally built) tokenizers."""
import numpy as np
import pytest

from colibri_dist.generate import SamplingParams, SchedulerConfig
from colibri_dist.generate.api import generate
from colibri_dist.generate.detok import Detokenizer

from gen_fake_model import FakeStepModel
from gen_tokenizers import ALL, CORPUS

TOKENIZERS = {name: make() for name, make in ALL.items()}


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_text_tokens_stream_complete_characters(name):
    tok = TOKENIZERS[name]
    ids = tok.encode(" ".join(CORPUS)).ids
    d = Detokenizer(tok)
    stream = ""
    for t in ids:
        delta = d.add(t)
        assert "\ufffd" not in delta
        stream += delta
        assert tok.decode(ids).startswith(stream)
    stream += d.finish()
    assert stream == tok.decode(ids) == d.text
    assert tok.decode(ids).replace(" ", "") == " ".join(CORPUS).replace(" ", "") or name == "wordpiece"


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_random_tokens_final_text_equals_decode(name):
    tok = TOKENIZERS[name]
    rng = np.random.default_rng(1)
    for _ in range(30):
        ids = [int(t) for t in rng.integers(0, tok.get_vocab_size(), int(rng.integers(1, 40)))]
        d = Detokenizer(tok)
        parts = [d.add(t) for t in ids]
        final = tok.decode(ids, skip_special_tokens=True)
        assert final.startswith("".join(parts))
        assert "".join(parts) + d.finish() == final


def _model(tok, **kw):
    return FakeStepModel(vocab_size=tok.get_vocab_size(), eos_token_ids=(1,), eos_boost=1.5, **kw)


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_streamed_text_equals_completion_text(name):
    tok = TOKENIZERS[name]
    prompts = ["one two", "héllo", "日本語", "copy: abc", "emoji"] * 3
    params = [SamplingParams(max_tokens=25, temperature=1.0, seed=i) for i in range(len(prompts))]
    events = []
    out = generate(_model(tok, num_blocks=30), tok, prompts, params,
                   SchedulerConfig(max_num_batched_tokens=12, prefill_chunk_size=3), on_token=events.append)
    for i, c in enumerate(out):
        mine = [e for e in events if e.index == i]
        assert [e.token_id for e in mine] == c.token_ids
        assert [e.finish_reason for e in mine] == [None] * (len(mine) - 1) + [c.finish_reason]
        assert "".join(e.text for e in mine) == c.text == tok.decode(c.token_ids, skip_special_tokens=True)
        assert c.prompt_token_ids == tok.encode(prompts[i]).ids


@pytest.mark.parametrize("name", ["byte_level_bpe", "metaspace_bpe", "word_level"])
def test_stop_strings(name):
    tok = TOKENIZERS[name]
    free = generate(_model(tok), tok, ["one two three"] * 8,
                    [SamplingParams(max_tokens=30, temperature=1.0, seed=s, ignore_eos=True) for s in range(8)])
    checked = 0
    for s, f in enumerate(free):
        text = f.text
        if len(text) < 8:
            continue
        stop = text[len(text) // 2: len(text) // 2 + 3]
        if not stop.strip() or "\ufffd" in stop:      # replacement chars of random bytes are no stop text
            continue
        events = []
        c = generate(_model(tok), tok, ["one two three"],
                     SamplingParams(max_tokens=30, temperature=1.0, seed=s, ignore_eos=True, stop=[stop, "\x00never"]),
                     on_token=events.append)[0]
        cut = text.find(stop)
        assert c.finish_reason == "stop" and c.stop_reason == stop
        assert c.text == text[:cut]
        assert f.token_ids[:len(c.token_ids)] == c.token_ids
        assert stop in tok.decode(c.token_ids) and stop not in tok.decode(c.token_ids[:-1])
        assert "".join(e.text for e in events) == c.text
        checked += 1
    assert checked >= 3


def test_a_run_of_skipped_special_tokens_costs_linear_decoding():
    """Issue 31 defect 10: 12k repeated eos (ignore_eos) took 12-18 s inside the shared step: every token
    re-decoded the whole run that added no text. Counted in decoded tokens, not seconds."""
    from colibri_dist.generate.detok import Detokenizer
    from colibri_dist.demos import llm as demo_llm
    tok = demo_llm.tokenizer()
    words = tok.encode("count: one two").ids
    ids = words + [demo_llm.EOS] * 3000 + words
    decoded = []

    class Counting:
        def decode(self, ids, skip_special_tokens=True):
            decoded.append(len(ids))
            return tok.decode(ids, skip_special_tokens=skip_special_tokens)

        def __getattr__(self, name):
            return getattr(tok, name)
    d = Detokenizer(Counting())
    streamed = "".join(d.add(t) for t in ids)
    assert sum(decoded) <= 8 * len(ids)                  # each add decodes a window of a few tokens
    assert streamed + d.finish() == tok.decode(ids, skip_special_tokens=True) == d.text
