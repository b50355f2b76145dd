"""Tiny converted checkpoints of the oracle families, built once per session for the pool tests."""
import os

import pytest

FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3", "gpt_oss")


@pytest.fixture(scope="session")
def tiny_sources(tmp_path_factory):
    from colibri_dist.format.tiny import write_tiny
    root = tmp_path_factory.mktemp("pool-hf")
    out = {}
    for fam in FAMILIES:
        write_tiny(fam, str(root / fam))
        out[fam] = str(root / fam)
    return out


@pytest.fixture(scope="session")
def tiny_models(tiny_sources, tmp_path_factory):
    from colibri_dist.format.convert import convert
    root = tmp_path_factory.mktemp("pool-models")
    return {fam: convert(src, str(root / f"{fam}.colibri"), experts="int8", progress=False)
            for fam, src in tiny_sources.items()}


@pytest.fixture
def fresh_model(tiny_sources, tmp_path):
    """A private copy of a family's model (hot-add persists experts beside the file)."""
    from colibri_dist.format.convert import convert

    def make(fam):
        return convert(tiny_sources[fam], os.path.join(str(tmp_path), f"{fam}.colibri"), experts="int8",
                       progress=False)
    return make
