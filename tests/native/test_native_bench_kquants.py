"""`python -m colibri_dist.bench kquants` runs end to end on tiny shapes: one row per (scheme, shape, tokens,
threads) with both colibri paths timed; with the llama.cpp build of shared/peers present, ggml's mul_mat column
too (native/tools/ggml_mul_mat.c compiled against it), else the peer is skipped with a message naming what is
missing."""
import json

import pytest

from colibri_dist.bench.kernels import kquants


def _run(tmp_path, extra):
    out = tmp_path / "kq.json"
    assert kquants.main(["--schemes", "q4_k,q6_k", "--shapes", "16x256,8x512", "--tokens", "1,3", "--threads", "1",
                         "--rounds", "1", "--mib", "1", "--json", str(out)] + extra) == 0
    return json.loads(out.read_text())


def test_bench_kquants_writes_a_row_per_scheme_shape_and_token_count(tmp_path):
    doc = _run(tmp_path, ["--no-peer"])
    rows = doc["rows"]
    assert {(r["scheme"], r["shape"], r["tokens"]) for r in rows} == \
        {(s, sh, n) for s in ("q4_k", "q6_k") for sh in ("16x256", "8x512") for n in (1, 3)}
    assert all(r["decode_ms"] > 0 and r["q8k_ms"] > 0 and "ggml_ms" not in r for r in rows)
    assert doc["peer_skipped"] == "--no-peer"
    for bad, why in (("16x300", "multiple of 256"), ("big", "ROWSxCOLS")):
        with pytest.raises(SystemExit, match=why):
            kquants.main(["--shapes", bad, "--no-peer", "--json", str(tmp_path / "x.json")])


def test_bench_kquants_times_ggml_when_the_llama_cpp_build_is_there(tmp_path):
    exe, why = kquants.build_peer(tmp_path)
    if exe is None:
        pytest.skip(f"ggml peer skipped: {why}")
    rows = _run(tmp_path, [])["rows"]
    assert all(r["ggml_ms"] > 0 and r["ggml_buffer"] for r in rows)
