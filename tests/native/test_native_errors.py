"""Bad inputs raise InvalidArgument / NativeError with a clear message; crash-prone ones run in a subprocess."""
import dataclasses
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from colibri_dist.errors import InvalidArgument, NativeError
from colibri_dist.format.quantize import pack_expert
from colibri_dist.native import Gating, Runtime, combine, expert_view
from native_helpers import rand_expert, random_layer


@pytest.fixture(scope="module")
def rt():
    with Runtime(threads=2) as r:
        yield r


@pytest.fixture(scope="module")
def layer():
    return random_layer(np.random.default_rng(0), hidden=64, inter=32, n_experts=8, top_k=2, shared=True)


def _x(n=4, h=64, dtype=np.float32):
    return np.random.default_rng(1).standard_normal((n, h)).astype(dtype)


@pytest.mark.parametrize("bad,match", [
    (lambda: _x(dtype=np.float64), "float32"),
    (lambda: _x()[:, ::2], "shape|contiguous"),
    (lambda: np.asfortranarray(_x(8, 64)), "C-contiguous"),
    (lambda: _x()[0], "2-D"),
    (lambda: _x(4, 65), "shape"),
    (lambda: [[0.0] * 64], "numpy"),
])
def test_bad_x_is_rejected(rt, layer, bad, match):
    with pytest.raises(InvalidArgument, match=match):
        rt.moe_forward(bad(), layer["router"], layer["gating"], layer["experts"])
    with pytest.raises(InvalidArgument):
        rt.route(bad(), layer["router"], layer["gating"])


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_rejected_naming_the_row(rt, layer, value):
    x = _x()
    x[2, 5] = value
    for call in (lambda: rt.moe_forward(x, layer["router"], layer["gating"], layer["experts"]),
                 lambda: rt.route(x, layer["router"], layer["gating"]),
                 lambda: rt.expert_forward(x, layer["experts"][0]),
                 lambda: rt.shared_forward(x, layer["shared"])):
        with pytest.raises(InvalidArgument, match=r"NaN/Inf.*\(2, 5\)"):
            call()


def test_overflowing_router_logits_raise_native_error(rt, layer):
    router = np.full((8, 64), 3e38, np.float32)
    with pytest.raises(NativeError, match="not finite") as info:
        rt.route(np.ones((2, 64), np.float32), router, layer["gating"])
    assert info.value.code == 7


def test_missing_routed_expert_is_a_native_error(rt, layer):
    idx, _ = rt.route(_x(), layer["router"], layer["gating"])
    experts = list(layer["experts"])
    experts[int(idx[0, 0])] = None
    with pytest.raises(NativeError, match=f"expert {int(idx[0, 0])} is routed to but missing") as info:
        rt.moe_forward(_x(), layer["router"], layer["gating"], experts)
    assert info.value.code == 1


def test_hidden_mismatch_and_bad_tables(rt, layer):
    other = random_layer(np.random.default_rng(2), hidden=48, inter=16, n_experts=8)
    with pytest.raises(InvalidArgument, match="expert 3 has hidden size 48"):
        rt.moe_forward(_x(), layer["router"], layer["gating"], {3: other["experts"][3]})
    with pytest.raises(InvalidArgument, match="outside"):
        rt.moe_forward(_x(), layer["router"], layer["gating"], {9: layer["experts"][0]})
    with pytest.raises(InvalidArgument, match="shape"):
        rt.route(_x(), layer["router"][:7].copy(), layer["gating"])
    with pytest.raises(InvalidArgument, match="rows must lie"):
        rt.expert_forward(_x(), layer["experts"][0], rows=[0, 4])
    with pytest.raises(InvalidArgument, match="shared_gate"):
        rt.shared_forward(_x(), layer["shared"], np.ones(63, np.float32))
    with pytest.raises(InvalidArgument, match="slot_out"):
        combine(np.ones((4, 2), np.float32), np.ones((4, 3, 8), np.float32))


@pytest.mark.parametrize("kw,match", [
    (dict(kind="topk"), "kind"), (dict(top_k=9), "top_k"), (dict(n_experts=0), "n_experts"),
    (dict(kind="sigmoid_group", n_group=3), "n_group"), (dict(kind="sigmoid_group", n_group=2, topk_group=3), "topk_group"),
    (dict(kind="sigmoid_group", n_group=4, topk_group=1, top_k=3), "exceeds"),
])
def test_bad_gating_configs(kw, match):
    args = dict(kind="softmax_topk", n_experts=8, top_k=2)
    args.update(kw)
    with pytest.raises(InvalidArgument, match=match):
        Gating(**args)


def test_bad_weights_and_layouts():
    rng = np.random.default_rng(3)
    g, u, d = rand_expert(rng, 32, 16)
    with pytest.raises(InvalidArgument, match="scheme"):
        pack_expert(g, u, d, "int4")
    with pytest.raises(InvalidArgument, match="shapes"):
        pack_expert(g, u, d.T, "f32")
    g2 = g.copy()
    g2[0, 0] = np.nan
    with pytest.raises(InvalidArgument, match="'gate'.*NaN"):
        pack_expert(g2, u, d, "int8")
    blob, layout = pack_expert(g, u, d, "int8")
    with pytest.raises(InvalidArgument, match="bytes"):
        expert_view(blob[:-64], layout)
    bad = dataclasses.replace(layout, down=dataclasses.replace(layout.down, data_offset=layout.nbytes - 8))
    with pytest.raises(InvalidArgument, match="down: data"):
        expert_view(blob, bad)
    bad = dataclasses.replace(layout, up=dataclasses.replace(layout.up, scale_count=3))
    with pytest.raises(InvalidArgument, match="up: scales"):
        expert_view(blob, bad)


def test_closed_runtime_and_bad_threads():
    r = Runtime(threads=1)
    r.close()
    with pytest.raises(InvalidArgument, match="closed"):
        r.route(_x(), np.ones((8, 64), np.float32), Gating("softmax_topk", 8, 2))
    with pytest.raises(InvalidArgument, match="threads"):
        Runtime(threads=0)
    with pytest.raises(NativeError, match="cpu"):
        Runtime(threads=1, cpus=[-1])
    with pytest.raises(NativeError, match="affinity mask"):
        Runtime(threads=2, cpus=[1023])


CRASH_PRONE = {
    "misaligned_and_truncated_blob": """
        blob, layout = pack_expert(g, u, d, "f32")
        expert_view(bytes(blob[1:]), layout)
    """,
    "layout_pointing_past_the_buffer": """
        blob, layout = pack_expert(g, u, d, "int8-g32")
        bad = dataclasses.replace(layout, gate=dataclasses.replace(layout.gate, scale_offset=10**9))
        Runtime(threads=1).expert_forward(x, expert_view(blob, bad))
    """,
    "rows_far_out_of_range": """
        blob, layout = pack_expert(g, u, d, "f32")
        Runtime(threads=2).expert_forward(x, expert_view(blob, layout), rows=np.array([10**9], np.int64))
    """,
    "use_after_close": """
        r = Runtime(threads=2); r.close(); r.combine = None
        blob, layout = pack_expert(g, u, d, "f32")
        r.expert_forward(x, expert_view(blob, layout))
    """,
}


@pytest.mark.parametrize("name", sorted(CRASH_PRONE))
def test_crash_prone_inputs_raise_in_a_subprocess(name):
    code = textwrap.dedent("""
        import dataclasses, numpy as np
        from colibri_dist.format.quantize import pack_expert
        from colibri_dist.native import Runtime, expert_view
        rng = np.random.default_rng(0)
        g = rng.standard_normal((16, 32)).astype(np.float32); u = g.copy(); d = rng.standard_normal((32, 16)).astype(np.float32)
        x = rng.standard_normal((3, 32)).astype(np.float32)
    """) + textwrap.dedent(CRASH_PRONE[name])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])   # a Python exception, not a signal
    assert "InvalidArgument" in proc.stderr
