"""Joining a Ray cluster that refuses us (issue 15: a token-auth head joined without the token
showed a raw ConnectionError traceback) is one PoolError naming the address. No Ray is started."""
import pytest

from colibri_dist.errors import PoolError
from colibri_dist.pool import ray_setup


def test_refused_join_is_one_pool_error(monkeypatch):
    def refuse(**kwargs):
        raise ConnectionError("Failed to connect to GCS: Unauthenticated: invalid or missing token")
    monkeypatch.setattr(ray_setup.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_setup.ray, "init", refuse)
    monkeypatch.setattr(ray_setup, "_match_token_auth", lambda: None)
    with pytest.raises(PoolError, match=r"cannot join the Ray cluster at '10.0.0.1:6379'.*token"):
        ray_setup.connect("10.0.0.1:6379")
