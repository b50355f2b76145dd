"""SIMD levels: names come from C, COLIBRI_SIMD caps the start-up choice, forcing a missing level is a clear error."""
import os
import subprocess
import sys

import pytest

from colibri_dist.errors import InvalidArgument, NativeError
from colibri_dist.native import simd_available, simd_force, simd_levels, simd_name

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_levels_come_from_c_lowest_first():
    levels = simd_levels()
    assert list(levels) == ["scalar", "avx2", "avx512", "amx"] and levels["scalar"] is None
    assert simd_available() == [n for n, m in levels.items() if m is None] and simd_name() in simd_available()
    for name, missing in levels.items():
        assert missing is None or (isinstance(missing, str) and missing)


def test_forcing_names_and_errors():
    with pytest.raises(InvalidArgument, match="simd level must be one of"):
        with simd_force("sse9"):
            pass
    for name, missing in simd_levels().items():
        if missing is None:
            with simd_force(name):
                assert simd_name() == name
        else:
            with pytest.raises(NativeError, match=missing.split()[0]):
                with simd_force(name):
                    pass


def test_a_bare_call_forces_and_a_with_block_gives_the_start_up_level_back():
    start = simd_name()
    other = next((lv for lv in simd_available() if lv != start), None)
    if other is None:
        pytest.skip("one SIMD level only: nothing to switch to")
    try:
        simd_force(other)                      # no with: in force from the call on (it once did nothing)
        assert simd_name() == other
    finally:
        with simd_force(other):
            pass
    assert simd_name() == start


@pytest.mark.parametrize("level", simd_available())
def test_environment_caps_the_start_up_level(level):
    env = dict(os.environ, COLIBRI_SIMD=level, PYTHONPATH=os.path.abspath(ROOT))
    out = subprocess.run([sys.executable, "-c", "from colibri_dist.native import simd_name; print(simd_name())"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out == level
