"""Structured outputs in a `colibri run` generate job (issue 33): one schema for the job
(job.sampling_params.structured_outputs), a row's own constraint in its sampling_params column, a row
whose schema does not compile gets its own error naming the field while the others finish, and every
completed row parses and validates."""
import json

import pytest

from colibri_dist.cli import EXIT_ROW_ERRORS, main
from colibri_dist.testing import random_llm

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "n"], "additionalProperties": False}


def test_a_job_with_a_schema_writes_rows_that_parse(tmp_path):
    model = random_llm.build(tmp_path / "m.colibri")
    rows = [{"id": f"r{i}", "prompt": f"extract {i}"} for i in range(24)]
    rows.append({"id": "own", "prompt": "code", "sampling_params": {"structured_outputs": {"regex": "[a-f]{4}"}}})
    rows.append({"id": "bad", "prompt": "x", "sampling_params": {"structured_outputs": {"json": {"type": "nope"}}}})
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "job.yaml").write_text(json.dumps({
        "job": {"kind": "generate", "input": str(tmp_path / "in.jsonl"), "executor": "engine",
                "sampling_params": {"max_tokens": 200, "temperature": 1.0,
                                    "structured_outputs": {"json": SCHEMA, "disable_any_whitespace": True}}},
        "model": model, "pool": {"workers": 0}, "report": {"html": False, "progress": "none"}}))
    rc = main(["run", str(tmp_path / "job.yaml"), "--out", str(tmp_path / "out")])
    assert rc == EXIT_ROW_ERRORS
    got = {}
    for line in open(tmp_path / "out" / "in.jsonl"):
        r = json.loads(line)
        got[r["id"]] = r
    assert len(got) == len(rows)
    assert "structured_outputs.json" in got["bad"]["error"]
    assert len(got["own"]["generated_text"]) == 4 and set(got["own"]["generated_text"]) <= set("abcdef")
    for i in range(24):
        jsonschema.validate(json.loads(got[f"r{i}"]["generated_text"]), SCHEMA)
