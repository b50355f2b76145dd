"""w8a8 at every batch size 1..64 on every SIMD level: equal to scalar bit for bit and batch invariant.

The amx level switches kernels by token count (AVX-512 below its threshold, AMX tiles of 16 tokens
above, a partial last tile), so every count from 1 to 64 is checked, on shapes with K tails and row
counts off the 16-row tile.
"""
import numpy as np
import pytest

from colibri_dist.native import Runtime, simd_force
from native_helpers import rand_expert, simd_params, view_of


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(64)
    view = view_of(rand_expert(rng, 150, 83), "int8")     # gate/up: 83 rows, K 150; down: 150 rows, K 83
    x = rng.standard_normal((64, 150)).astype(np.float32)
    with Runtime(threads=2, w8a8=True) as rt, simd_force("scalar"):
        ref = {n: rt.expert_forward(np.ascontiguousarray(x[:n]), view) for n in range(1, 65)}
    return view, x, ref


@pytest.mark.parametrize("level", simd_params())
def test_w8a8_batches_1_to_64_equal_scalar_and_are_batch_invariant(case, level):
    view, x, ref = case
    with Runtime(threads=2, w8a8=True) as rt, simd_force(level):
        full = rt.expert_forward(x, view)
        for n in range(1, 65):
            out = rt.expert_forward(np.ascontiguousarray(x[:n]), view)
            assert np.array_equal(out, ref[n]), f"level {level}, batch {n}: differs from scalar"
            assert np.array_equal(out, full[:n]), f"level {level}, batch {n}: differs from the 64-row batch"
