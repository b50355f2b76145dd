"""tests/serve: one in-process server per module on loopback over the demo language model (no torch)."""
import pytest

import colibri_dist as cd

import fastapi  # noqa: F401  (the [test] extra pins fastapi and uvicorn: missing is a failure, not a skip)
import uvicorn  # noqa: F401


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory):
    """Path to a 2-layer, 8-expert demo MoE LLM (.colibri with tokenizer + chat template)."""
    from colibri_dist.demos import llm as demo_llm
    root = tmp_path_factory.mktemp("serve-demo")
    demo_llm.write_checkpoint(str(root / "hf"), layers=2, n_experts=8)
    cd.convert(str(root / "hf"), str(root / "m.colibri"), progress=False)
    return str(root / "m.colibri")


@pytest.fixture(scope="session")
def reference_llm(demo_model):
    """The same model in process: what the server's answers must equal bit for bit."""
    with cd.LLM(demo_model) as llm:
        yield llm

