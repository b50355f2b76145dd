"""Convert holds a bounded amount of memory whatever the model's size: big matrices (the LM head) are
encoded in chunks of rows, bit-identical to encoding them whole, and the writer writes back and drops what
it wrote every FLUSH_BYTES; inside a memory cgroup smaller than one float32 copy of the LM head, convert
completes (the checkpoint is made by `bench scale`'s builder)."""
import os
import sys

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.encodings import BY_NAME, SCALE_SUPER
from colibri_dist.errors import InvalidArgument
from colibri_dist.format import dense_plan, spec, writer
from colibri_dist.format.layout import SCHEMES
from colibri_dist.format.quantize import pack_matrix, pack_matrix_stream, rows_separable

SEPARABLE = sorted(s for s in SCHEMES if rows_separable(s))


@pytest.mark.parametrize("scheme", SEPARABLE)
@pytest.mark.parametrize("rows,cols,chunk", [(37, 130, 5), (64, 64, 64), (10, 7, 3), (300, 256, 299), (304, 256, 299)])
def test_stream_is_pack_matrix_bit_for_bit(scheme, rows, cols, chunk):
    if BY_NAME[scheme].scale_kind == SCALE_SUPER and cols % BY_NAME[scheme].group:
        pytest.skip(f"{scheme} takes whole super-blocks of {BY_NAME[scheme].group} cols only")
    group = BY_NAME[scheme].row_group
    if rows % group:
        pytest.skip(f"{scheme} stores rows in groups of {group}")
    w = np.random.default_rng(rows * cols).standard_normal((rows, cols)).astype(np.float32)
    blob, layout = pack_matrix(w, scheme)
    asked = []
    chunks, nbytes, layout2 = pack_matrix_stream(lambda a, b: asked.append((a, b)) or w[a:b], rows, cols, scheme, chunk)
    got = b"".join(c if isinstance(c, bytes) else c.tobytes() for c in chunks)
    assert got == blob.tobytes() and nbytes == blob.size and layout2 == layout
    whole = -(-chunk // group) * group          # a chunk of whole row groups (q4_k_r8: 299 rows -> 304)
    assert all(b - a <= whole and a % group == 0 for a, b in asked) and asked[-1][1] == rows


def test_whole_matrix_schemes_are_refused_by_the_stream():
    assert "int8-minmax" in SCHEMES and not rows_separable("int8-minmax")
    with pytest.raises(InvalidArgument, match="whole matrix"):
        pack_matrix_stream(lambda a, b: None, 4, 4, "int8-minmax", 2)


def _blobs(path):
    with cd.open_model(path) as m:
        return {e.name: bytes(m.matrix(e.name)[0]) for e in m.entries if e.kind == spec.KIND_MATRIX}


@pytest.mark.parametrize("dense", ["int8", "int4-g64", "bf16", "int8-minmax"])
def test_small_chunks_and_flushes_write_the_same_matrices(tiny_dir, tmp_path, monkeypatch, dense):
    src, _ = tiny_dir("qwen2_moe")
    cd.convert(src, tmp_path / "whole.colibri", experts="int8", dense=dense, progress=False)
    flushes = []
    real = writer._flush
    monkeypatch.setattr(writer, "_flush", lambda fd, a, b: flushes.append((a, b)) or real(fd, a, b))
    monkeypatch.setattr(writer, "FLUSH_BYTES", 4096)
    monkeypatch.setattr(dense_plan, "CHUNK_F32_BYTES", 256)      # a few rows per chunk
    cd.convert(src, tmp_path / "chunked.colibri", experts="int8", dense=dense, progress=False)
    assert _blobs(tmp_path / "chunked.colibri") == _blobs(tmp_path / "whole.colibri")
    assert len(flushes) > 3 and all(b > a for a, b in flushes)
    assert flushes[0][0] == 0 and all(end == start for (_, end), (start, _) in zip(flushes, flushes[1:]))  # contiguous
    with cd.open_model(tmp_path / "chunked.colibri") as m:
        m.verify(progress=False)


def test_convert_completes_in_a_memory_cgroup_smaller_than_its_lm_head(tmp_path):
    from colibri_dist.bench.scale import checkpoint, limits, shapes
    why = limits.available()
    if why:
        pytest.skip(why)
    cfg = dict(shapes.config("qwen3-tiny", 1), vocab_size=131072, hidden_size=1024, num_experts=8)
    hf = checkpoint.build(str(tmp_path / "hf"), cfg, {"skew": 0.3, "locality": 2.0}, log=lambda m: None)
    dst = str(tmp_path / "m.colibri")                        # lm_head: 512 MiB as float32, 128 MiB in int8
    with limits.MemoryLimit(448 << 20, name=f"colibri-test-convert-{os.getpid()}") as lim:
        r = lim.run([sys.executable, "-m", "colibri_dist", "convert", hf, dst, "--experts", "int8",
                     "--no-progress"], timeout=600)
    assert r["rc"] == 0 and r["oom_kills"] == 0, r["stderr"][-2000:]
    assert 0 < r["peak_rss"] < 448 << 20                    # the process's own (VmHWM), page cache aside
    with cd.open_model(dst) as m:
        assert m.matrix("lm_head.weight")[1].rows == 131072
