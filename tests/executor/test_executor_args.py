"""Bad input at the MoeExecutor boundary: clear errors, never a crash."""
import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.errors import FormatError, InvalidArgument
from engine_models import HIDDEN, tokens


@pytest.fixture
def eng(engine_models):
    with cd.MoeExecutor(engine_models["mixtral"], threads=1, cache_bytes=1 << 20) as e:
        yield e


@pytest.mark.parametrize("x, match", [
    (tokens(3, hidden=HIDDEN + 1), r"shape \[n, 32\]"),
    (tokens(3).astype(np.float64), "float32"),
    (tokens(3)[0], r"shape \[n, 32\]"),
    ([[0.0] * HIDDEN], "numpy array"),
    (np.full((2, HIDDEN), np.nan, np.float32), "NaN or Inf"),
])
def test_engine_rejects_bad_x(eng, x, match):
    for call in (eng.moe_forward, eng.route, eng.shared_forward):
        with pytest.raises(InvalidArgument, match=match):
            call(0, x)


@pytest.mark.parametrize("layer", [2, -1, "0", 0.0, True])
def test_engine_rejects_bad_layer(eng, layer):
    with pytest.raises(InvalidArgument, match="not an MoE layer"):
        eng.moe_forward(layer, tokens(2))


def test_engine_rejects_bad_expert_and_rows(eng):
    with pytest.raises(InvalidArgument, match="expert 8 out of range for layer 0"):
        eng.expert_forward(0, 8, tokens(2))
    with pytest.raises(InvalidArgument, match="rows must be 1-D indices"):
        eng.expert_forward(0, 1, tokens(2), rows=[0, 2])


def test_engine_closed(engine_models):
    e = cd.MoeExecutor(engine_models["mixtral"], threads=1)
    e.close()
    e.close()
    with pytest.raises(InvalidArgument, match="closed"):
        e.moe_forward(0, tokens(1))


def test_engine_missing_or_bad_container(tmp_path):
    with pytest.raises(FormatError, match="missing.colibri"):
        cd.MoeExecutor(tmp_path / "missing.colibri")
    junk = tmp_path / "junk.colibri"
    junk.write_bytes(b"not a container" * 100)
    with pytest.raises(FormatError, match="junk.colibri"):
        cd.MoeExecutor(junk)
    with pytest.raises(FormatError, match="colibri"):
        cd.MoeExecutor(tmp_path)            # a directory


def test_engine_bad_options(engine_models):
    with pytest.raises(InvalidArgument, match="unknown cache policy"):
        cd.MoeExecutor(engine_models["mixtral"], policy="random")
    with pytest.raises(InvalidArgument, match="compression"):
        cd.MoeExecutor(engine_models["mixtral"], cache_bytes=1 << 20, offload_dir="/tmp", compression="lz4")


def test_engine_bad_threads_cleans_up(engine_models, tmp_path):
    import threading
    before = threading.active_count()
    with pytest.raises(cd.ColibriError):
        cd.MoeExecutor(engine_models["mixtral"], threads=-3, cache_bytes=1 << 20, offload_dir=str(tmp_path / "off"))
    assert threading.active_count() == before
    assert not list((tmp_path / "off").glob("colibri-spill-*"))
