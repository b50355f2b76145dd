"""The scratch arena through the C API: 64-byte alignment, exhaustion, reset, high-water."""
import pytest

from colibri_dist.native._lib import ffi, lib


@pytest.fixture
def arena():
    out = ffi.new("cb_arena **")
    assert lib.cb_arena_create(4096, out) == lib.CB_OK
    yield out[0]
    lib.cb_arena_destroy(out[0])


def _addr(p):
    return int(ffi.cast("uintptr_t", p))


def test_allocations_are_64_byte_aligned_and_packed(arena):
    ptrs = [lib.cb_arena_alloc(arena, n) for n in (1, 63, 64, 65, 200)]
    assert all(p != ffi.NULL and _addr(p) % 64 == 0 for p in ptrs)
    assert [_addr(b) - _addr(a) for a, b in zip(ptrs, ptrs[1:])] == [64, 64, 64, 128]
    assert lib.cb_arena_used(arena) == 64 * 3 + 128 + 256


def test_exhaustion_returns_null_and_reset_reuses(arena):
    first = lib.cb_arena_alloc(arena, 1000)
    assert lib.cb_arena_alloc(arena, 4096) == ffi.NULL
    assert lib.cb_arena_used(arena) == 1024
    lib.cb_arena_reset(arena)
    assert lib.cb_arena_used(arena) == 0 and lib.cb_arena_high_water(arena) == 1024
    assert lib.cb_arena_alloc(arena, 10) == first
    assert lib.cb_arena_capacity(arena) == 4096
