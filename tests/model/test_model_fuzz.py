"""Hostile model configs and tokenizer files: every case ends in a clear ColibriError or a working
LLM whose logits are finite, never another exception, a crash or a hang (seeded, bounded)."""
import json
import shutil

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import ColibriError

pytest.importorskip("torch")
KEYS = ["num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "rope_parameters", "vocab_size",
        "sliding_window", "rms_norm_eps", "max_position_embeddings", "num_hidden_layers", "tie_word_embeddings",
        "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "q_lora_rank", "rope_interleave",
        "clip_qkv", "layer_types", "use_sliding_window"]
VALUES = [None, 0, -3, 1, 7, 3.5, "x", [], {}, True, 10 ** 12, {"rope_type": "dynamic"},
          {"rope_type": "yarn", "factor": 2.0}, {"rope_type": "linear"}, ["sliding_attention"]]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    from model_cases import write_case
    out = {}
    for case in ("qwen2_moe", "deepseek_v3"):
        d = tmp_path_factory.mktemp(case)
        write_case(case, d)
        out[case] = d
    return out


def _outcome(path):
    try:
        with cd.LLM(path, kv_cache_bytes=1 << 20) as llm:
            logits = llm.logits([1, 2, 3])
            assert np.isfinite(logits).all()
            return "ok"
    except ColibriError as exc:
        assert str(exc)
        return "error"


@pytest.mark.parametrize("case", ["qwen2_moe", "deepseek_v3"])
def test_mutated_configs(sources, tmp_path, case):
    rng = np.random.default_rng(11)
    base = json.loads((sources[case] / "config.json").read_text())
    outcomes = []
    for i in range(14):
        cfg = dict(base)
        for _ in range(int(rng.integers(1, 3))):
            key = KEYS[int(rng.integers(len(KEYS)))]
            value = VALUES[int(rng.integers(len(VALUES)))]
            if value is None:
                cfg.pop(key, None)
            else:
                cfg[key] = value
        src = tmp_path / f"s{i}"
        shutil.copytree(sources[case], src)
        (src / "config.json").write_text(json.dumps(cfg))
        try:
            cd.convert(src, tmp_path / f"m{i}.colibri", experts="f32", progress=False)
        except ColibriError:
            outcomes.append("convert error")
            continue
        outcomes.append(_outcome(tmp_path / f"m{i}.colibri"))
    assert "error" in outcomes or "convert error" in outcomes


@pytest.mark.parametrize("content", ["not json", "{\"model\": 3}", "[]", "{}", "[" * 100000])
def test_damaged_tokenizer_files(sources, tmp_path, content):
    src = tmp_path / "s"
    shutil.copytree(sources["qwen2_moe"], src)
    (src / "tokenizer.json").write_text(content)
    (src / "generation_config.json").write_text(content)
    cd.convert(src, tmp_path / "m.colibri", experts="f32", progress=False)
    with pytest.raises(ColibriError, match=r"m\.colibri: (tokenizer\.json|generation_config\.json)"):
        cd.LLM(tmp_path / "m.colibri")
