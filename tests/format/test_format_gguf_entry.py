"""`colibri generate MODEL.gguf` and `colibri serve MODEL.gguf` import the file once into the cache (front.container,
format/gguf_cache.py) and answer as LLM on the imported container does; a second run reuses the import."""
import os

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.cli import main
from colibri_dist.generate import SamplingParams

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
from gguf_tiny import write_gguf  # noqa: E402  (needs gguf)
from test_format_gguf import tokenizer_and_writer  # noqa: E402

PROMPT = "Hello world"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny F32 Qwen3-MoE GGUF with a 320-token tokenizer, and what LLM on its import generates greedily."""
    import transformers
    from colibri_dist.format.tiny import _COMMON
    torch.manual_seed(2)
    cfg = transformers.Qwen3MoeConfig(**dict(_COMMON, vocab_size=320, intermediate_size=48, moe_intermediate_size=16,
                                             num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, head_dim=8))
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    d = tmp_path_factory.mktemp("gguf-entry")
    write_gguf(model, d / "m.gguf", tokenizer=tokenizer_and_writer()[1])
    cd.convert(d / "m.gguf", d / "ref.colibri", progress=False)
    with cd.LLM(str(d / "ref.colibri")) as llm:
        want = llm.generate([PROMPT], SamplingParams(max_tokens=6, temperature=0.0))[0].text
    assert want
    return d / "m.gguf", want


def cached(cache):
    return sorted(os.listdir(cache / "gguf")) if (cache / "gguf").exists() else []


def test_generate_imports_a_gguf_once(tiny, tmp_path, monkeypatch, capsys):
    path, want = tiny
    monkeypatch.setenv("COLIBRI_CACHE_DIR", str(tmp_path))
    argv = ["generate", str(path), PROMPT, "--max-tokens", "6", "--temperature", "0"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out == want + "\n" and "importing" in err
    entries = cached(tmp_path)
    assert len(entries) == 1 and entries[0].endswith(".colibri")
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out == want + "\n" and "importing" not in err and cached(tmp_path) == entries


def test_serve_imports_a_gguf_once_and_answers(tiny, tmp_path, monkeypatch):
    import httpx
    from colibri_dist.serve import Server, ServeConfig
    path, want = tiny
    monkeypatch.setenv("COLIBRI_CACHE_DIR", str(tmp_path))
    server = Server(ServeConfig(model=str(path), port=0)).start()       # as tests/serve/serve_helpers.start_server
    try:
        assert server.cfg.model.startswith(str(tmp_path / "gguf")) and server.cfg.model_names == ("m",)
        with httpx.Client(base_url=server.url, timeout=60) as c:
            r = c.post("/v1/completions", json={"model": "m", "prompt": PROMPT, "max_tokens": 6, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == want
    finally:
        server.stop()
    assert len(cached(tmp_path)) == 1


def test_a_newer_importer_imports_a_cached_file_again(tiny, tmp_path, monkeypatch):
    """The cache key holds gguf_import.REVISION: an import an older importer made (DeepSeek's f32 kv_b_proj before
    revision 2) is not reused once the importer writes the file's matrices differently."""
    from colibri_dist.format import gguf_cache, gguf_import
    path, _ = tiny
    monkeypatch.setenv("COLIBRI_CACHE_DIR", str(tmp_path))
    first = gguf_cache.cache_path(path)
    assert gguf_cache.cache_path(path) == first
    monkeypatch.setattr(gguf_import, "REVISION", gguf_import.REVISION + 1)
    assert gguf_cache.cache_path(path) != first
