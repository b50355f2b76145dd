import pytest

import colibri_dist as cd


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
