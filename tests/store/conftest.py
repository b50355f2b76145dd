import pytest

from store_fakes import FakeModel


@pytest.fixture
def fake_model(tmp_path):
    return FakeModel(tmp_path / "fake.colibri")
