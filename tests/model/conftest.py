"""Shared fixtures for the model tests: whole models converted once per session, the transformers oracle on one
torch thread."""
import pytest

import colibri_dist as cd


@pytest.fixture(scope="module", autouse=True)
def torch_one_thread():
    """The transformers oracle on one intra-op thread, in each module here (put back after it: other directories
    keep torch's default). Its tiny models gain nothing from more threads, and on 2 loaded cores torch's thread pool
    made a generate ~20x slower (same tokens). The thread count is the machine's choice either way (CI's differs
    from a laptop's), so no test here can depend on it."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def whole_model(tmp_path_factory):
    """whole_model(case, experts="f32", dense=None, lm_head=None) -> (path to .colibri, float32 transformers model)."""
    pytest.importorskip("torch")
    from model_cases import write_case
    made, models = {}, {}

    def get(case, experts="f32", dense=None, lm_head=None):
        key = (case, experts, dense, lm_head)
        if key not in made:
            if case not in models:
                src = tmp_path_factory.mktemp(f"hf-{case}")
                models[case] = (src, write_case(case, src))
            src, hf = models[case]
            dst = tmp_path_factory.mktemp(f"cb-{case}") / f"{case}-{experts}-{dense}-{lm_head}.colibri"
            cd.convert(src, dst, experts=experts, dense=dense, lm_head=lm_head, progress=False)
            made[key] = dst
        return made[key], models[case][1]
    return get
