"""The release gate fails a candidate that costs more per task than its control (issue 25, item 4).

Tool calls, model turns and tokens per task are compared on the cases both releases ran, against
limits in the release policy (20% by default); the stricter of the two releases' limits applies.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from fixtures.costly_release import costly, padded
from support import REPO, cli_env, toolgate
from test_evals_gate import SUBSET, seeded, subset

from toolgate.errors import ConfigurationError
from toolgate.evals.fixtures import dump_cases
from toolgate.evals.gate import GateResult, evaluate_gate
from toolgate.policy.cost_limits import COST_METRICS, CostLimits, over_limit
from toolgate.policy.rules import PolicyRules

COSTLY_REF = f"{REPO / 'tests' / 'fixtures' / 'costly_release.py'}:costly"


def increase(result: GateResult, metric: str) -> float:
    """Percent by which the candidate's ``metric`` per task exceeds the control's (shared cases)."""
    assert result.control is not None
    shared = {r.case.id for r in result.candidate.records} & {r.case.id for r in result.control.records}
    mine, theirs = (
        result.candidate.cost_per_task(shared)[metric],
        result.control.cost_per_task(shared)[metric],
    )
    return 100 * (mine / theirs - 1)


def cost_lines(result: GateResult) -> list[str]:
    return [f for f in result.failures() if f.split("=")[0] in COST_METRICS]


def test_limits_default_to_twenty_percent_and_refuse_nonsense() -> None:
    assert CostLimits.from_mapping({}) == CostLimits(20.0, 20.0, 20.0)
    assert CostLimits.from_mapping({"tokens_per_task": 5}).tokens_per_task == 5.0
    for raw, message in (
        ({"tokens": 10}, "unknown cost limit(s) tokens"),
        ({"tokens_per_task": True}, "must be a percent >= 0"),
        ({"tokens_per_task": -1}, "must be a percent >= 0"),
        ({"tokens_per_task": math.nan}, "must be a percent >= 0"),
        ({"tokens_per_task": math.inf}, "must be a percent >= 0"),
        ({"tokens_per_task": "20"}, "must be a percent >= 0"),
        (["tokens_per_task"], "must be an object"),
    ):
        with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
            CostLimits.from_mapping(raw)


def test_a_policy_document_carries_its_limits_and_they_are_part_of_its_digest() -> None:
    document = {"schema_version": 1, "policy_version": "1", "rules": []}
    plain = PolicyRules.from_mapping(document)
    strict = PolicyRules.from_mapping({**document, "cost_limits": {"model_turns_per_task": 0}})
    assert plain.cost_limits == CostLimits() and strict.cost_limits.model_turns_per_task == 0
    assert plain.sha256 != strict.sha256  # a changed limit is a changed, reviewed policy
    with pytest.raises(ConfigurationError, match="unknown cost limit"):
        PolicyRules.from_mapping({**document, "cost_limits": {"dollars": 1}})


def test_over_limit_is_strictly_more_than_the_limit_and_any_rise_from_zero() -> None:
    assert not over_limit(120.0, 100.0, 20)  # at the limit
    assert over_limit(120.1, 100.0, 20)  # just over it
    assert not over_limit(80.0, 100.0, 0)  # cheaper is never a failure
    assert not over_limit(0.0, 0.0, 0)
    assert over_limit(0.5, 0.0, 20)
    assert CostLimits(30, 5, 50).stricter(CostLimits(10, 40, 50)) == CostLimits(10, 5, 50)


# Cost is a property of the dataset's tasks: the generated cases are probes, not tasks, and are
# left out (derived=False) where only cost is asked about; the CLI run below has them.
def test_a_candidate_with_forty_percent_more_tokens_per_task_fails_naming_the_metric() -> None:
    result = evaluate_gate(subset(), costly, "ops-tools/1.1.0", derived=False)
    assert result.candidate.facts.manifest_status == "verified"
    rise = increase(result, "tokens_per_task")
    assert rise >= 40
    assert result.failures() == cost_lines(result)  # nothing else about it fails
    (line,) = cost_lines(result)
    assert line.startswith("tokens_per_task=") and f"(+{rise:.1f}%, limit +20%)" in line
    assert not result.passed
    # what it does is the same: same calls and turns per task
    assert increase(result, "tool_calls_per_task") == increase(result, "model_turns_per_task") == 0


def test_a_candidate_within_the_limit_passes_and_cannot_loosen_the_limit_for_itself() -> None:
    slight = evaluate_gate(subset(), padded("ops-tools/1.1.1-slight", 10), "ops-tools/1.1.0", derived=False)
    assert 0 < increase(slight, "tokens_per_task") < 20 and slight.passed, slight.failures()
    lenient = padded("ops-tools/1.1.1-lenient", 28, cost_limits=CostLimits(tokens_per_task=1000))
    result = evaluate_gate(subset(), lenient, "ops-tools/1.1.0", derived=False)
    (line,) = cost_lines(result)
    assert line.startswith("tokens_per_task=") and "limit +20%" in line
    # a candidate may tighten them: its stricter limit fails the slight rise
    strict = padded("ops-tools/1.1.1-strict", 10, cost_limits=CostLimits(tokens_per_task=5))
    (strict_line,) = cost_lines(evaluate_gate(subset(), strict, "ops-tools/1.1.0", derived=False))
    assert "limit +5%" in strict_line


def test_toolgate_evals_run_fails_the_costly_candidate_with_the_cost_line(tmp_path: Path) -> None:
    path = tmp_path / "subset.jsonl"
    path.write_text(dump_cases(list(seeded(SUBSET, "ops-tools/1.1.0").cases)), encoding="utf-8")
    (tmp_path / "data").mkdir()
    toolgate(["init"], cli_env(tmp_path / "data"))  # the store the verdict is kept in (evals run creates none)
    args = ["evals", "run", "--dataset", str(path), "--candidate", COSTLY_REF, "--control", "ops-tools/1.1.0"]
    args.append("--no-require-review")  # only the cost line fails it
    run = toolgate(
        [*args, "--report-dir", str(tmp_path / "reports")], cli_env(tmp_path / "data"), check=False
    )
    assert run.returncode == 1, run.stderr
    assert run.stdout.splitlines()[0].endswith("gate=FAIL")
    failures = [line for line in run.stdout.splitlines() if line.startswith("gate_failure ")]
    assert len(failures) == 1 and failures[0].startswith("gate_failure tokens_per_task="), run.stdout
    assert "evidence=recorded verdict=FAIL" in run.stdout  # kept in the store: no move on this run
