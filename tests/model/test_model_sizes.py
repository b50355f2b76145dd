"""LLM sizes: max_seq_len against max_position_embeddings, the default KV budget (max_num_seqs x max_seq_len,
capped by free RAM; said once per process as a log line, a warning only when it
clamps a length or exceeds the free RAM), logits of the last positions only, checksums."""
import re
import warnings

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import InvalidArgument
from colibri_dist.model import kv_budget


@pytest.fixture(scope="module")
def path(whole_model):
    return whole_model("qwen3_moe", experts="int8", dense="int8")[0]      # max_position_embeddings=128


def ids(n, seed):
    return np.random.default_rng(seed).integers(0, 97, n).tolist()


def test_max_seq_len_beyond_the_model_is_refused_unless_forced(path):
    with pytest.raises(InvalidArgument, match="max_seq_len=200 is beyond .*max_position_embeddings=128.*"
                                              "allow_long_context=True"):
        cd.LLM(path, max_seq_len=200)
    with cd.LLM(path, max_seq_len=200, allow_long_context=True) as llm:
        assert llm.max_seq_len == 200 and len(llm.logits(ids(150, 1))) == 150
    with cd.LLM(path, max_seq_len=64) as llm:
        assert llm.max_seq_len == 64
    with pytest.raises(InvalidArgument, match="max_seq_len must be a positive integer"):
        cd.LLM(path, max_seq_len=0)


def test_default_budget_holds_max_num_seqs_full_sequences(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")                              # nothing to warn about
        with cd.LLM(path, max_num_seqs=3) as llm:
            assert llm.cache.n_blocks == 3 * 128 // 16 and llm.max_seq_len == 128
            assert llm.stats()["kv_cache"]["max_seq_len"] == 128


def _said(caplog):
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "colibri.kv_cache"]


def test_a_lazy_default_budget_capped_by_free_ram_is_an_info_line_once(path, monkeypatch, caplog):
    """The default budget capped by the RAM is reserved lazily: no UserWarning, one INFO line per process."""
    with cd.LLM(path, max_num_seqs=1) as llm:
        block = llm.cache.block_bytes
    monkeypatch.setattr(kv_budget, "_SAID", set())
    monkeypatch.setattr(kv_budget, "available_ram", lambda: int(20 * block / kv_budget.RAM_FRACTION))
    caplog.set_level("INFO", logger="colibri.kv_cache")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                              # no raw UserWarning
        for _ in range(2):                                          # loaded twice: said once
            with cd.LLM(path, max_num_seqs=4) as llm:
                assert llm.cache.n_blocks == 20
    said = _said(caplog)
    assert len(said) == 1 and said[0][0] == "INFO"
    assert re.search(r"default budget is .* reserved lazily\): 320 positions, fewer than max_num_seqs=4 x "
                     r"max_seq_len=128, so long batches preempt", said[0][1])


def test_a_clamped_length_or_a_budget_beyond_the_free_ram_is_a_warning_once(path, monkeypatch, caplog):
    with cd.LLM(path, max_num_seqs=1) as llm:
        block = llm.cache.block_bytes
    monkeypatch.setattr(kv_budget, "_SAID", set())
    for _ in range(2):
        with cd.LLM(path, kv_cache_bytes=5 * block) as llm:
            assert llm.max_seq_len == 80
    assert [s for s in _said(caplog) if "so max_seq_len is capped from 128 to 80" in s[1]] == \
        [("WARNING", _said(caplog)[0][1])]
    caplog.clear()
    monkeypatch.setattr(kv_budget, "available_ram", lambda: 10 * block)
    with cd.LLM(path, kv_cache_bytes=40 * block):
        pass
    assert _said(caplog) == [("WARNING", f"colibri KV cache: kv_cache_bytes={40 * block:,} is more than the "
                                         f"{10 * block:,} bytes of free RAM; reserved lazily, it swaps or is killed "
                                         f"when it fills (lower kv_cache_bytes)")]


def test_default_budget_arithmetic():
    assert kv_budget.default_budget(1000, 16, 4, 100, available=10 ** 9) == (4 * 7 * 1000, 28000, 10 ** 9 // 4)
    assert kv_budget.default_budget(1000, 16, 4, 100, available=8000)[0] == 2000
    assert kv_budget.default_budget(1000, 16, 4, 100, available=1)[0] == 1000          # at least one block


def test_logits_of_the_last_positions_only(path):
    a, b = ids(30, 2), ids(21, 3)
    with cd.LLM(path) as llm:
        full_a, full_b = llm.logits_batch([a, b])
        last = llm.logits_batch([a, b], last_only=True)
        assert [x.shape for x in last] == [(1, 97), (1, 97)]
        assert np.array_equal(last[0], full_a[-1:]) and np.array_equal(last[1], full_b[-1:])
        assert np.array_equal(llm.logits(a, positions=[0, -2, 5]), full_a[[0, 28, 5]])
        assert np.array_equal(llm.logits(a, positions=-1), full_a[-1:])
        with pytest.raises(InvalidArgument, match="out of range for 21 tokens"):
            llm.logits_batch([a, b], positions=[25])
        with pytest.raises(InvalidArgument, match="last_only or positions, not both"):
            llm.logits(a, last_only=True, positions=[1])
        with pytest.raises(InvalidArgument, match="positions must be a list of integers"):
            llm.logits(a, positions=["x"])
        with pytest.raises(InvalidArgument, match="last_only must be True or False"):
            llm.logits(a, last_only=1)
        assert llm.cache.free_blocks() == llm.cache.n_blocks


def test_checksums_option_reaches_the_container(path):
    with cd.LLM(path, checksums=False) as llm:
        assert llm.executor.model.checksums is False
    with cd.LLM(path) as llm:
        assert llm.executor.model.checksums is True
