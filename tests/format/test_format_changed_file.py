"""A model file edited in place while open is refused (issue 21, the changed-file check): views are
checked once per process, so the reader re-checks size/mtime/inode (one fstat) on every engine
and decoder call and names the file instead of mixing old and new bytes."""
import os
import shutil

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import IntegrityError
from colibri_dist.moe_executor import MoeExecutor


def _edit_in_place(path, offset):
    st = os.stat(path)
    with open(path, "r+b") as f:           # same size, same inode: only the bytes and mtime differ
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))   # coarse clocks: make it visible


@pytest.fixture
def model_copy(converted, tmp_path):
    path, _ = converted("mixtral", "f32")
    dst = tmp_path / "m.colibri"
    shutil.copy(path, dst)
    return dst


def test_engine_refuses_a_file_edited_while_open(model_copy):
    with MoeExecutor(model_copy) as eng:
        layer = eng.model.moe_layers[0]
        x = np.random.default_rng(0).standard_normal((3, eng.model.config.hidden)).astype(np.float32)
        first = eng.moe_forward(layer, x)
        assert np.array_equal(eng.moe_forward(layer, x), first)       # unchanged: no false alarm
        off, nbytes, _ = eng.model.expert_location(layer, 0)
        _edit_in_place(model_copy, off + nbytes // 2)
        with pytest.raises(IntegrityError, match=f"{model_copy}: the model file changed on disk while open"):
            eng.moe_forward(layer, x)


def test_llm_generate_refuses_a_file_edited_while_open(model_copy):
    llm = cd.LLM(model_copy)
    try:
        params = cd.SamplingParams(max_tokens=3, temperature=0.0)
        llm.generate([[1, 2, 3]], params)
        _edit_in_place(model_copy, os.path.getsize(model_copy) // 2)
        with pytest.raises(IntegrityError, match=r"changed on disk while open \(mtime_ns"):
            llm.generate([[1, 2, 3]], params)
    finally:
        llm.close()
