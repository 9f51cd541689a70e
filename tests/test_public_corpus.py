"""Real published definitions (the Berkeley Function Calling Leaderboard's, from the installed
``bfcl-eval`` package: `make test` installs it, nothing is copied into this repository) through
every importer that takes a JSON definition, with no hand edit (`toolgate.evals.public_corpus`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from toolgate.evals.public_corpus import (
    broken_calls,
    ground_truth_call,
    package_data,
    run,
    summary_lines,
    to_openai,
)
from toolgate.tools.shapes.definitions import from_openai
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.spec import ArgumentsInvalid

POLICY = OperatorPolicy(risk="read-only", owner="o", scopes=frozenset({"x:read"}))


def test_the_runner_reads_the_dialect_and_the_ground_truth_as_published() -> None:
    function = {
        "name": "calculate_triangle_area",
        "description": "Area of a triangle.",
        "parameters": {
            "type": "dict",
            "properties": {
                "base": {"type": "integer", "description": "Base."},
                "scale": {"type": "float", "description": "Scale.", "default": "1.0"},
                "where": {"type": "dict", "properties": {"city": {"type": "string", "description": "City."}}},
            },
            "required": ["base"],
        },
    }
    mapping = {"integer": "integer", "float": "number", "dict": "object", "string": "string"}
    definition = to_openai(function, mapping)
    parameters = definition["function"]["parameters"]
    assert parameters["type"] == "object" and parameters["properties"]["scale"]["type"] == "number"
    assert parameters["properties"]["where"]["type"] == "object"
    answer = {"base": [10], "scale": ["", 1.0], "where": [{"city": ["Paris", "paris"]}]}
    call = ground_truth_call(answer, parameters)
    assert call == {"base": 10, "scale": 1.0, "where": {"city": "Paris"}}
    spec = from_openai(definition, lambda **_: "ok", POLICY)  # "1.0" fails its own schema: dropped
    assert spec.parse_arguments(call) == call
    kinds = []
    for kind, broken in broken_calls(call, parameters):
        kinds.append(kind)
        with pytest.raises(ArgumentsInvalid):
            spec.parse_arguments(broken)
    assert kinds == ["undeclared_top_level", "undeclared_nested", "required_dropped", "wrong_type"]


def test_the_public_corpus_loads_as_published(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = package_data()
    if data is None:
        if os.environ.get("CI"):
            pytest.fail("the corpus package bfcl-eval is not installed: `make test` installs it")
        pytest.skip("bfcl-eval is not installed (make test installs it: pip install --no-deps bfcl-eval)")
    results = run(data)
    out = Path(os.environ.get("TOOLGATE_CORPUS_RESULTS", tmp_path / "public_corpus.json"))
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    with capsys.disabled():
        print("\n" + "\n".join(summary_lines(results)) + f"\nwritten to {out}")
    assert results["definitions"] >= 3000
    assert results["loaded_as_published"] == {
        importer: results["definitions"] for importer in ("openai", "anthropic", "langchain")
    }
    assert results["broken_calls"] >= 9000 and results["broken_accepted"] == 0
    assert results["must_accept_accepted"] >= 0.9 * results["must_accept_calls"]
    # what is still refused is the published answer breaking the published schema, or a free-form
    # object the operator has not opened: never a definition, never a load
    assert all(name.startswith("must_accept:") for name in results["refusal_classes"]), results[
        "refusal_classes"
    ]
