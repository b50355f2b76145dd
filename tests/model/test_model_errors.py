"""Bad input to the whole-model engine: a clear ColibriError naming the argument or file, never a crash."""
import json
import shutil

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import ColibriError, FormatError, InvalidArgument
from colibri_dist.model import KVCacheFull


@pytest.fixture(scope="module")
def path(whole_model):
    return whole_model("mixtral")[0]


def test_token_ids_outside_the_vocabulary(path):
    with cd.LLM(path) as llm:
        with pytest.raises(InvalidArgument, match=r"token id 97 at position 2 is outside the vocabulary 0\.\.96"):
            llm.logits([1, 2, 97])
        with pytest.raises(InvalidArgument, match="token id -1"):
            llm.logits([-1])
        with pytest.raises(InvalidArgument, match="integers"):
            llm.logits([0.5, 1.0])
        assert llm.free_blocks() == llm.cache.n_blocks        # nothing leaked by the failed calls


def test_empty_sequences(path):
    with cd.LLM(path) as llm:
        with pytest.raises(InvalidArgument, match="non-empty"):
            llm.logits([])
        with pytest.raises(InvalidArgument, match="non-empty list"):
            llm.logits_batch([])


def test_longer_than_max_seq_len(path):
    with cd.LLM(path, max_seq_len=16) as llm:
        assert llm.logits(list(range(16))).shape == (16, 97)
        with pytest.raises(KVCacheFull, match="max_seq_len=16"):
            llm.logits(list(range(17)))
        seq = llm.new_sequence()
        llm.forward([(seq, list(range(10)), False)])
        with pytest.raises(KVCacheFull, match="17 tokens"):
            llm.forward([(seq, list(range(7)), False)])
        assert llm.forward([(seq, list(range(6)), False)])[0].shape == (1, 97)   # still usable


def test_kv_budget_too_small_and_full(path):
    with pytest.raises(InvalidArgument, match="kv_cache_bytes"):
        cd.LLM(path, kv_cache_bytes=100)
    block = 3 * 2 * 16 * (10 + 10) * 4          # layers x kv heads x positions x (K + V row) x f32
    with cd.LLM(path, kv_cache_bytes=2 * block + 100) as llm:   # two 16-position blocks
        assert llm.cache.block_bytes == block
        assert llm.max_seq_len == 32
        a = llm.new_sequence()
        llm.forward([(a, list(range(20)), False)])
        b = llm.new_sequence()
        with pytest.raises(KVCacheFull, match="KV cache full"):
            llm.forward([(b, list(range(20)), False)])


def test_closed_llm(path):
    llm = cd.LLM(path)
    llm.close()
    with pytest.raises(InvalidArgument, match="closed"):
        llm.logits([1])


def test_moe_layer_only_container_is_refused(tmp_path):
    pytest.importorskip("torch")
    from safetensors.numpy import load_file, save_file
    from colibri_dist.format import tiny
    src = tmp_path / "src"
    tiny.write_tiny("mixtral", src)
    tensors = load_file(src / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if "self_attn" not in k}, src / "model.safetensors")
    dst = tmp_path / "moe-only.colibri"
    cd.convert(src, dst, experts="f32", progress=False)
    with cd.MoeExecutor(dst) as eng:                    # still a fine MoE-layer container
        assert eng.moe_forward(0, np.ones((1, eng.config.hidden), np.float32)).shape == (1, eng.config.hidden)
    with pytest.raises(FormatError, match=r"moe-only\.colibri: tensor 'model\.layers\.0\.self_attn\.q_proj\.weight' "
                                          r"is missing"):
        cd.LLM(dst)


def test_unsupported_rope_type_names_the_key(tmp_path):
    pytest.importorskip("torch")
    from model_cases import write_case
    src = tmp_path / "src"
    write_case("qwen3_moe", src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 10000.0}
    (src / "config.json").write_text(json.dumps(cfg))
    cd.convert(src, tmp_path / "m.colibri", experts="f32", progress=False)
    with pytest.raises(FormatError, match=r"rope_parameters\.rope_type 'longrope' is not supported"):
        cd.LLM(tmp_path / "m.colibri")


def test_errors_are_colibri_errors():
    assert issubclass(KVCacheFull, ColibriError)
