"""Fixtures of the jobs tests (helpers live in jobs_helpers.py, a uniquely named module)."""
import dataclasses
import shutil
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from colibri_dist.config import load_config
from colibri_dist.demos.classifier import demo_words, ensure_demo, write_dataset
from jobs_helpers import FakeExecutor, FakeModel, tiny_demo


@pytest.fixture(scope="session")
def tiny_container(tmp_path_factory):
    """The tiny demo classifier converted to a real .colibri (FakeModel holds the same weights): the resume
    signature reads the container's content identity from the file."""
    cache = tmp_path_factory.mktemp("tiny-demo")
    return ensure_demo(dataclasses.replace(tiny_demo(), cache_dir=str(cache)), log=lambda _: None).model


@pytest.fixture
def fake_job(tmp_path, tiny_container):
    """A token-classification job over a tiny generated dataset, runnable with FakeModel/FakeExecutor."""
    demo = tiny_demo()
    model = FakeModel(demo)
    data = tmp_path / "data"
    write_dataset(str(data), demo, model.class_of, model.token_probs, demo_words(demo.vocab_size))
    model_file = tmp_path / "fake.colibri"
    shutil.copyfile(tiny_container, model_file)
    cfg_path = tmp_path / "job.yaml"
    cfg_path.write_text(f"job:\n  kind: token-classification\n  input: {data}\n  batch_tokens: 8\n"
                        f"model: {model_file}\nreport: {{progress: none, summary: false, html: false}}\n")
    state = SimpleNamespace(model=model, executors=[], cfg_path=str(cfg_path), data=str(data), tmp=tmp_path)

    def run(out, fail_after=None, restart=False, **overrides):
        from colibri_dist.jobs.pipeline import run_job
        cfg = load_config(state.cfg_path)
        for key, value in overrides.items():
            section, name = key.split("__")
            setattr(getattr(cfg, section), name, value)

        def factory(cfg, path, offload):
            ex = FakeExecutor(model, fail_after)
            state.executors.append(ex)
            return ex

        @contextmanager
        def opener(path):
            yield model
        return run_job(cfg, out_dir=str(out), restart=restart, executor_factory=factory, model_opener=opener)

    state.run = run
    return state

