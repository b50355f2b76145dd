import pytest

from engine_models import make_model


@pytest.fixture(scope="session")
def engine_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine-models")
    return {f: make_model(f, str(root)) for f in ("mixtral", "qwen2_moe", "deepseek_v3")}
