"""Shared fixtures for the format tests: tiny checkpoints converted once per session."""
import pytest

pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """make(family, layout="hub", dtype="float32", shards=None) -> (src_dir, model), cached."""
    from colibri_dist.format import tiny
    cache = {}

    def make(family, layout="hub", dtype="float32", shards=None):
        key = (family, layout, dtype, shards)
        if key not in cache:
            d = tmp_path_factory.mktemp(f"{family}-{layout}-{dtype}")
            model = tiny.write_tiny(family, d / "src", layout=layout, dtype=dtype, max_shard_size=shards)
            cache[key] = (d / "src", model)
        return cache[key]
    return make


@pytest.fixture(scope="session")
def converted(tiny_dir, tmp_path_factory):
    """conv(family, experts="f32", layout="hub", dtype="float32") -> (path, model), cached."""
    from colibri_dist import convert
    cache = {}

    def conv(family, experts="f32", layout="hub", dtype="float32", shards=None):
        key = (family, experts, layout, dtype, shards)
        if key not in cache:
            src, model = tiny_dir(family, layout, dtype, shards)
            dst = tmp_path_factory.mktemp("colibri") / f"{family}-{experts}.colibri"
            convert(src, dst, experts=experts, progress=False)
            cache[key] = (dst, model)
        return cache[key]
    return conv
