"""The error classes say what went wrong: a caller's bad value is an InvalidArgument naming `.parameter` and
`.value` (vLLM's validation error), a resource that ran out a ResourceError, non-finite logits a
NumericalError that `colibri` exits 4 on (not 2, its usage-error code)."""
import json
import os
import pickle

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist.cli import EXIT_NUMERICAL, EXIT_USAGE, main
from colibri_dist.config import load_config
from colibri_dist.errors import (ColibriError, IntegrityError, InvalidArgument, NumericalError, ResourceError)
from colibri_dist.generate import SamplingParams
from colibri_dist.generate.engine import LLMEngine
from colibri_dist.generate.sampler import NonFiniteLogits
from colibri_dist.jobs.pipeline import run_generation_job
from colibri_dist.model import KVCacheFull
from colibri_dist.pool.config import PoolConfig

from gen_fake_llm import FakeLLM
from gen_fake_model import FakeStepModel


@pytest.mark.parametrize("kw,parameter,value", [
    ({"temperature": -1.0}, "temperature", -1.0),
    ({"top_k": "3"}, "top_k", "3"),
    ({"top_p": 0}, "top_p", 0),
    ({"stop_token_ids": [1, -2]}, "stop_token_ids", [1, -2]),
    ({"min_tokens": 5, "max_tokens": 2}, "min_tokens", 5),
    ({"ignore_eos": "yes"}, "ignore_eos", "yes"),
])
def test_sampling_params_name_the_parameter_and_value(kw, parameter, value):
    with pytest.raises(InvalidArgument) as info:
        SamplingParams(**kw)
    assert (info.value.parameter, info.value.value) == (parameter, value)
    assert f"SamplingParams.{parameter}" in str(info.value)


def test_unknown_keys_pool_options_and_llm_kwargs_name_theirs_and_pickle_intact():
    with pytest.raises(InvalidArgument) as info:
        SamplingParams.from_dict({"temprature": 0.5})
    assert (info.value.parameter, info.value.value) == ("temprature", 0.5)
    with pytest.raises(InvalidArgument) as info:
        PoolConfig(workers=0)
    assert (info.value.parameter, info.value.value) == ("pool.workers", 0)
    again = pickle.loads(pickle.dumps(info.value))        # what a Ray actor's error goes through
    assert type(again) is InvalidArgument and (again.parameter, again.value) == ("pool.workers", 0)
    assert str(again) == str(info.value) and "pool.workers" in str(again)
    with pytest.raises(InvalidArgument) as info:
        cd.LLM(None)
    assert info.value.parameter == "model"
    assert InvalidArgument("plain").parameter is None and str(InvalidArgument("plain")) == "plain"


def test_the_engine_keeps_the_parameter_when_it_names_the_request():
    eng = LLMEngine(FakeStepModel(vocab_size=32))
    with pytest.raises(InvalidArgument) as info:
        eng.add_request("r1", [3, 4, 5], {"top_p": 1.5})
    assert str(info.value).startswith("request 'r1': ") and info.value.parameter == "top_p"
    assert info.value.value == 1.5


def test_resource_and_numerical_errors_are_not_invalid_arguments():
    assert issubclass(KVCacheFull, ResourceError) and not issubclass(KVCacheFull, InvalidArgument)
    assert issubclass(NonFiniteLogits, NumericalError) and not issubclass(NonFiniteLogits, InvalidArgument)
    for cls in (ResourceError, NumericalError, IntegrityError):
        assert issubclass(cls, ColibriError) and getattr(cd, cls.__name__) is cls and cls.__name__ in cd.__all__


class NaNLLM(FakeLLM):
    """The fake LLM whose model's logits are all NaN."""

    def _model(self):
        model = super()._model()
        forward = model.forward
        model.forward = lambda steps: [np.full_like(x, np.nan) for x in forward(steps)]
        return model


def test_non_finite_logits_keep_their_class_and_colibri_exits_4(monkeypatch, capsys):
    with pytest.raises(NonFiniteLogits, match="^request '0': "):          # LLM.generate raises it, as vLLM
        NaNLLM().generate(["one two three"], SamplingParams(max_tokens=3))
    out = NaNLLM().generate(["one two three"], SamplingParams(max_tokens=3), errors="return")[0]
    assert isinstance(out.error, NonFiniteLogits) and str(out.error).startswith("request '0': ")
    monkeypatch.setattr("colibri_dist.cli.generate.open_llm", lambda args: NaNLLM())
    assert main(["generate", "m.colibri", "one two three", "--max-tokens", "3"]) == EXIT_NUMERICAL == 4
    assert "logits are not finite" in capsys.readouterr().err
    assert main(["generate", "m.colibri", "one two three", "--top-p", "0"]) == EXIT_USAGE   # still a usage error


def test_a_job_with_on_error_fail_stops_on_a_numerical_fault_as_one(tmp_path):
    os.makedirs(tmp_path / "data")
    (tmp_path / "data" / "in.jsonl").write_text(json.dumps({"id": "a", "prompt": "one two"}) + "\n")
    cfg_path = tmp_path / "job.yaml"
    cfg_path.write_text("job:\n  kind: generate\n  input: data\n  on_error: fail\n"
                        "  sampling_params: {max_tokens: 3}\nreport: {progress: none}\n")
    with pytest.raises(NumericalError, match="row 'a': the model's logits are not finite"):
        run_generation_job(load_config(str(cfg_path)), NaNLLM(), out_dir=str(tmp_path / "out"))
