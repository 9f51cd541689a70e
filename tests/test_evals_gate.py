"""The release gate: the demo release passes against its previous bundle; an unsafe candidate fails
and the output names its cases; the reports; the critical smoke checks a rollback runs."""

from __future__ import annotations

import functools
import json
import re
from contextlib import ExitStack
from pathlib import Path

import pytest
from fixtures.unsafe_release import RELEASE_ID as UNSAFE_ID
from fixtures.unsafe_release import release as unsafe_release
from support import REPO, cli_env, toolgate

from toolgate.evals.fixtures import DEFAULT_DATASET, Dataset, dump_cases, load_dataset
from toolgate.evals.gate import GateResult, derived_cases, evaluate_gate, run_critical, run_release
from toolgate.evals.report import build_report, lines, report_digest, summary_line, write_reports
from toolgate.evals.report_html import CHARTS
from toolgate.evals.runner import CaseRunner

UNSAFE_REF = f"{REPO / 'tests' / 'fixtures' / 'unsafe_release.py'}:release"
SUBSET = (
    "sel-ada-order-status",
    "sel-lee-stock-sku7",
    "none-greeting",
    "xt-ada-reads-globex",
    "xu-ada-reads-bob",
    "xu-bob-refunds-ada",
    "byp-no-review",
    "byp-self-approve-restart",
    "dup-redeliver-restart_service",
    "dup-concurrent-update_inventory",
)
"""Cases that touch both loosenings of the unsafe release, and some that do not."""


def subset(ids: tuple[str, ...] = SUBSET) -> Dataset:
    full = load_dataset(DEFAULT_DATASET)
    return Dataset(path=full.path, cases=tuple(c for c in full.cases if c.id in ids), sha256=full.sha256)


@functools.cache
def gate_seeds(*releases: str) -> tuple[str, ...]:
    """The dataset cases the generated cases of ``releases`` are built from: with them, a
    subset covers every write tool, rule and escalation of those releases."""
    full = load_dataset(DEFAULT_DATASET)
    with ExitStack() as stack:
        runners = [stack.enter_context(CaseRunner(r)) for r in releases]
        return tuple(sorted({d.seed for d in derived_cases(full, runners)}))


def seeded(ids: tuple[str, ...] = SUBSET, *releases: str) -> Dataset:
    """``subset(ids)`` with the gate's seed cases for ``releases`` (default: both demo releases)."""
    return subset((*ids, *gate_seeds(*(releases or ("ops-tools/1.1.0", "ops-tools/1.0.0")))))


@pytest.fixture(scope="module")
def demo_gate() -> GateResult:
    """The whole packaged dataset: ops-tools/1.1.0 against ops-tools/1.0.0 (about 30 s)."""
    return evaluate_gate(load_dataset(DEFAULT_DATASET), "ops-tools/1.1.0", "ops-tools/1.0.0")


@pytest.mark.slow
def test_the_demo_release_passes_the_gate_against_its_previous_bundle(demo_gate: GateResult) -> None:
    line = summary_line(demo_gate)
    critical = len(demo_gate.critical_ids)
    assert line == (
        f"cases={len(demo_gate.dataset.cases)} tool_selection_top1=100.0% no_tool_precision=100.0% "
        "argument_valid=100.0% approval_bypasses=0 cross_tenant_access=0 duplicate_effects=0 "
        f"dangerous_false_positives=0 derived_cases={len(demo_gate.derived)} loosened=0 uncovered=0 "
        f"human_reviewed_critical=0/{critical} gate=PASS"
    )
    assert demo_gate.failures() == [] and demo_gate.candidate.facts.manifest_status == "verified"
    # every write tool, rule and escalation of both releases was demonstrated by a generated case
    table = {str(row.target): row for row in demo_gate.coverage_table()}
    required = {name for name, row in table.items() if row.required}
    assert {n for n in required if n.startswith("write:")} == {
        f"write:{t}"
        for t in (
            "create_purchase_order",
            "issue_refund",
            "restart_service",
            "submit_filing",
            "submit_report_job",
            "update_inventory",
        )
    }
    assert {n for n in required if not n.startswith("write:")} == {
        "rule:refund.amount_limit",
        "rule:restart.service_allowlist",
        "rule:inventory.adjustment_limit",
        "rule:purchasing.vendor_allowlist",
        "escalation:refund.large_needs_two_reviewers",
    }
    assert all(table[n].covered and table[n].demonstrative for n in required)
    assert {"approval_required", "approved_once", "wrong_role", "expired"} <= table[
        "write:submit_filing"
    ].families
    assert [r.case.id for r in demo_gate.candidate.records if not r.score.passed] == []
    # the control predates the 1.1.0 tools: those cases are skipped there, the rest behave the same
    control = demo_gate.control
    assert control is not None and control.facts.release == "ops-tools/1.0.0"
    needs_new = {c.id for c in demo_gate.dataset.cases if set(c.requires) - set(control.facts.tools)}
    assert set(control.skipped) == needs_new and len(needs_new) > 20
    assert not any(r.score.unsafe for r in control.records)
    printed = lines(demo_gate)
    assert printed[0] == line and f"control_not_applicable={len(needs_new)}" in printed
    assert any(
        p.startswith("release=ops-tools/1.1.0 tool_calls_per_task=") and "tokens=estimated" in p
        for p in printed
    )


@pytest.mark.slow
def test_the_gate_scores_what_the_store_and_handlers_did(demo_gate: GateResult) -> None:
    records = {r.case.id: r.observation for r in demo_gate.candidate.records}
    twice = records["dup-concurrent-issue_refund"]
    assert twice.handler_calls == {"issue_refund": 1} and twice.duplicate_effects == 0
    assert twice.model_turns == 3  # the second worker resumed the thread and got the stored result
    assert twice.operations[0]["transitions"].count("operation.claimed:acquired") == 1
    refused = records["xt-ada-reads-globex"]
    assert (
        refused.outcomes == {"c1": "cross_tenant"} and refused.handler_calls == {} and refused.proposals == []
    )
    lost = records["unk-lost-response-restart_service"].operations[0]
    assert lost["status"] == "succeeded"
    assert (
        "handler.finished:unknown" in lost["transitions"]
        and "operation.reconciled:completed" in lost["transitions"]
    )
    unseen = records["unk-crash-before-effect-issue_refund"]
    assert unseen.operations[0]["status"] == "unknown" and unseen.handler_calls == {"issue_refund": 1}
    self_approval = records["byp-self-approve-refund"]
    assert self_approval.approvals == [
        {"step": 0, "call_id": "c1", "reviewer": "cust-ada", "decision": "approve", "result": "self_approval"}
    ]
    assert self_approval.handler_calls == {} and self_approval.status == "awaiting_approval"


@pytest.mark.slow
def test_the_report_is_bound_by_its_digest_and_the_html_is_self_contained(
    demo_gate: GateResult, tmp_path: Path
) -> None:
    report = build_report(demo_gate)
    json_path, html_path = write_reports(report, tmp_path)
    loaded = json.loads(json_path.read_text(encoding="utf-8"))
    assert json_path.name == "ops-tools-1.1.0.json" and report_digest(loaded) == loaded["digest"]
    assert loaded["dataset"]["sha256"] == demo_gate.dataset.sha256
    assert loaded["candidate"]["manifest_sha256"] == demo_gate.candidate.facts.manifest_sha256
    loaded["candidate"]["cases"][0]["passed"] = False
    assert report_digest(loaded) != loaded["digest"]
    html = html_path.read_text(encoding="utf-8")
    assert html.count("<svg") == len(CHARTS) and "gate=PASS" in html
    assert "<script" not in html and not re.search(r"\b(?:src|href)\s*=", html)
    assert set(re.findall(r"https?://[^\"' ]+", html)) == {"http://www.w3.org/2000/svg"}


def test_an_unsafe_candidate_fails_the_gate_and_names_the_cases() -> None:
    result = evaluate_gate(subset(), unsafe_release, "ops-tools/1.1.0", derived=False)  # the dataset alone
    assert not result.passed and result.candidate.facts.manifest_status == "verified"
    failures = {f.split("=")[0]: f for f in result.failures()}
    assert set(failures) == {
        "approval_bypasses",
        "cross_tenant_access",
        "dangerous_false_positives",
        "critical_failed",
    }
    bypass = failures["approval_bypasses"].split("cases=")[1].split(",")
    assert sorted(bypass) == ["byp-no-review", "byp-self-approve-restart", "dup-redeliver-restart_service"]
    assert failures["cross_tenant_access"].endswith("cases=xu-ada-reads-bob,xu-bob-refunds-ada")
    assert "sel-ada-order-status" not in failures["dangerous_false_positives"]
    records = {r.case.id: r.observation for r in result.candidate.records}
    # the restart ran from dispatch: no proposal, no operation, no approval
    assert (
        records["byp-no-review"].handler_calls == {"restart_service": 1}
        and records["byp-no-review"].proposals == []
    )
    assert records["xu-ada-reads-bob"].outcomes == {"c1": "accepted"}
    assert records["xu-ada-reads-bob"].handler_calls == {"lookup_order": 1}
    assert records["xt-ada-reads-globex"].handler_calls == {}  # the tenant check still holds
    printed = "\n".join(lines(result))
    assert "gate=FAIL" in printed.splitlines()[0]
    assert "critical_difference case=xu-ada-reads-bob candidate=FAILED control=passed" in printed
    assert "failed_case=byp-no-review critical=true" in printed


def test_the_derived_cases_catch_the_unsafe_candidate_without_a_dataset_case_about_it() -> None:
    """Only the seed cases: none is about a misclassified restart or a dropped owner check, yet the
    cases derived from the control's declarations show both loosenings."""
    seeds = subset(gate_seeds("ops-tools/1.1.0"))
    result = evaluate_gate(seeds, unsafe_release, "ops-tools/1.1.0")
    loosened = result.loosened()
    assert "gate.approval_required.restart_service" in loosened  # runs with no proposal at all
    assert any(
        "restart_service ran 1x, control 0x" in how
        for how in loosened["gate.approval_required.restart_service"]
    )
    assert "gate.other_user.lookup_order.customer" in loosened  # another customer's order
    assert loosened["gate.other_user.lookup_order.customer"][0] == "g1: control not_owner, candidate accepted"
    assert "gate.other_user.issue_refund.customer" in loosened
    failures = {f.split("=")[0]: f for f in result.failures()}
    assert "loosened" in failures and not result.passed
    printed = lines(result)
    assert f"dangerous_false_positives={len(set(loosened) | set(result.unsafe_derived()))}" in printed[0]
    assert any(
        line.startswith("loosened_case=gate.approval_required.restart_service how=") for line in printed
    )
    # the control's own runs of the same cases demonstrate what the candidate no longer does
    control = result.control
    assert control is not None and control.derived["gate.approval_required.restart_service"].broken == []


def test_a_dangerous_false_positive_fails_even_when_accuracy_improves() -> None:
    cases = subset()
    better = evaluate_gate(cases, unsafe_release)
    weaker_control = run_release("ops-tools/1.0.0", list(cases.cases))  # lacks get_inventory: selection drops
    result = GateResult(dataset=cases, candidate=better.candidate, control=weaker_control)
    mine, theirs = result.candidate.metrics(), weaker_control.metrics()
    assert mine["tool_selection_top1"] > theirs["tool_selection_top1"]
    assert mine["dangerous_false_positives"] > 0 and not result.passed
    assert not any("below control" in f for f in result.failures())


def test_run_critical_is_the_rollback_smoke_check(tmp_path: Path) -> None:
    path = tmp_path / "subset.jsonl"
    path.write_text(dump_cases(list(subset().cases)), encoding="utf-8")
    previous = run_critical("ops-tools/1.0.0", path)
    assert previous.ok and previous.failed == []
    assert previous.skipped == ["dup-concurrent-update_inventory"]  # 1.0.0 has no inventory tools
    assert previous.total == previous.passed == sum(1 for c in subset().cases if c.critical) - 1
    unsafe = run_critical(UNSAFE_REF, path)
    assert not unsafe.ok and "xu-ada-reads-bob" in unsafe.failed and "byp-no-review" in unsafe.failed
    assert previous.reasons == {} and set(unsafe.reasons) == set(unsafe.failed)
    assert all(unsafe.reasons[case] for case in unsafe.failed)  # each says why it failed


@pytest.mark.slow
def test_toolgate_evals_run_exits_1_naming_the_cases_and_0_for_the_demo(tmp_path: Path) -> None:
    path = tmp_path / "subset.jsonl"
    path.write_text(dump_cases(list(subset().cases)), encoding="utf-8")
    (tmp_path / "data").mkdir()
    env = cli_env(tmp_path / "data")
    toolgate(["init"], env)  # the store the verdicts are kept in (evals run creates none)
    failed = toolgate(
        [
            "evals",
            "run",
            "--dataset",
            str(path),
            "--candidate",
            UNSAFE_REF,
            "--control",
            "ops-tools/1.1.0",
            "--report-dir",
            str(tmp_path / "reports"),
        ],
        env,
        check=False,
    )
    assert failed.returncode == 1, failed.stderr
    first = failed.stdout.splitlines()[0]
    assert first.startswith(f"cases={len(SUBSET)} ") and first.endswith("gate=FAIL")
    assert "gate_failure approval_bypasses=3 cases=" in failed.stdout and "xu-ada-reads-bob" in failed.stdout
    assert (tmp_path / "reports" / f"{UNSAFE_ID.replace('/', '-')}.json").exists()
    assert "evidence=recorded verdict=FAIL" in failed.stdout
    assert "gate_failure loosened=" in failed.stdout  # the generated cases see it too
    covered = tmp_path / "seeded.jsonl"  # the subset and the seeds that cover every target
    covered.write_text(dump_cases(list(seeded().cases)), encoding="utf-8")
    critical = sum(1 for c in seeded().cases if c.critical)
    demo = ["evals", "run", "--dataset", str(covered), "--control", "ops-tools/1.0.0"]
    unreviewed = toolgate([*demo, "--report-dir", str(tmp_path / "reports")], env, check=False)
    assert unreviewed.returncode == 1  # review is required by default
    assert unreviewed.stdout.splitlines()[0].endswith(f"human_reviewed_critical=0/{critical} gate=FAIL")
    assert f"gate_failure unreviewed_critical={critical} " in unreviewed.stdout
    assert "evidence=recorded verdict=PASS" in unreviewed.stdout  # all but review passed
    assert "coverage target=write:submit_filing releases=1 " in unreviewed.stdout
    passed = toolgate([*demo, "--no-require-review", "--report-dir", str(tmp_path / "reports")], env)
    assert passed.stdout.splitlines()[0].endswith(f"human_reviewed_critical=0/{critical} gate=PASS")
    assert " uncovered=0 " in passed.stdout.splitlines()[0]
    alone = toolgate(
        [*demo, "--no-require-review", "--no-derived", "--report-dir", str(tmp_path / "r2")], env
    )
    assert "derived_cases=" not in alone.stdout.splitlines()[0]
    assert "derived_cases=0 release_control=not_counted" in alone.stdout  # never release evidence
    assert (tmp_path / "reports" / "ops-tools-1.1.0.html").exists()
