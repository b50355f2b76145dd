"""The default arithmetic (issue 18 item 5): w8a8 / w4a8 everywhere above the native Runtime, `w8a8=False`
(`--weights-only`, `job.w8a8: false`) the exact-weights mode, and no mix of the two in one model."""
import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.cli import build_parser
from colibri_dist.errors import InvalidArgument


def test_llm_and_engine_default_to_the_integer_path_and_w8a8_false_is_exact(whole_model):
    path, _ = whole_model("mixtral", experts="int4-g64", dense="int8")
    ids = np.arange(11) % 90
    with cd.LLM(path) as fast, cd.LLM(path, w8a8=False) as exact:
        assert fast.executor.runtime.w8a8 and not exact.executor.runtime.w8a8
        a, b = fast.logits(ids), exact.logits(ids)
    assert not np.array_equal(a, b)                  # the two modes are different arithmetic
    cos = float(np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert cos >= 0.97, cos
    engine = cd.MoeExecutor(path)
    try:
        assert engine.runtime.w8a8 is True
    finally:
        engine.close()


class _Executor:
    def __init__(self, w8a8):
        self.w8a8 = w8a8

    def moe_forward(self, layer, x):
        raise AssertionError("not reached")


@pytest.mark.parametrize("llm_w8a8", [True, False])
def test_an_moe_executor_in_the_other_mode_is_refused(whole_model, llm_w8a8):
    path, _ = whole_model("mixtral", experts="int8", dense="int8")
    with pytest.raises(InvalidArgument, match=f"LLM\\(w8a8={llm_w8a8}\\) but its moe= executor runs "
                                              f"w8a8={not llm_w8a8}"):
        cd.LLM(path, w8a8=llm_w8a8, moe=_Executor(not llm_w8a8))
    with cd.LLM(path, w8a8=llm_w8a8, moe=_Executor(llm_w8a8)) as llm:   # the same mode: accepted
        assert llm.executor.runtime.w8a8 is llm_w8a8


@pytest.mark.parametrize("flags, want", [([], True), (["--weights-only"], False)])
def test_cli_generate_and_serve_take_weights_only(whole_model, flags, want):
    from colibri_dist.cli.generate import open_llm
    from colibri_dist.cli.serve import config_from_args
    path, _ = whole_model("mixtral", experts="int8", dense="int8")
    args = build_parser().parse_args(["generate", str(path), "hi", *flags])
    llm = open_llm(args)
    try:
        assert llm.moe is None and llm.executor.runtime.w8a8 is want
    finally:
        llm.close()
    score = build_parser().parse_args(["score", str(path), "f.txt", *flags])
    assert score.w8a8 is want
    engine = config_from_args(build_parser().parse_args(["serve", str(path), *flags])).engine_args()
    assert engine.w8a8 is want and engine.llm_kwargs()["w8a8"] is want and engine.pool_kwargs()["w8a8"] is want
