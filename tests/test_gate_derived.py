"""Issue 25: the gate's cases derived from a release's own declarations, and the world a case runs in.

On a fresh ``toolgate release init`` release (two tools, a small gate dataset): the gate derives a
case for every write, read, scope, ownership, output bound, rate limit and the approval window,
demonstrates every one on the release itself, and fails each single loosening naming the case the
candidate let further than the control; a dataset that seeds no write leaves it uncovered and
fails. The case world: the store's clock moves only when a case says so (an approval after the
window is refused ``expired``), a case's people are its own, a rate window can be found all but
used, calls copy earlier results (their own thread's or someone else's prelude), results grown
past any bound reach the model cut to the tool's bound, forwarded credentials reach the handler.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import cli_env, toolgate

from toolgate.evals.case_world import CaseStore
from toolgate.evals.coverage import loosenings, stage
from toolgate.evals.fixtures import Dataset, DatasetError, EvalCase, load_dataset, parse_line
from toolgate.evals.gate import GateResult, dataset_people, evaluate_gate
from toolgate.evals.gate_targets import Declarations, union_roles
from toolgate.evals.mutants import mutants_of
from toolgate.evals.observation import Observation
from toolgate.evals.report import coverage_lines, lines
from toolgate.evals.runner import CaseRunner
from toolgate.releases.bundle import Release
from toolgate.releases.loader import load_release
from toolgate.tools.demo.crm import DEMO_CRM_TOKEN

ADA = {
    "user_id": "ada",
    "tenant_id": "acme",
    "roles": ["customer"],
    "scopes": ["tickets:read", "tickets:write"],
}
BOB = {**ADA, "user_id": "bob"}
SAM = {"user_id": "sam", "tenant_id": "acme", "roles": ["support"], "scopes": ["tickets:read"]}
CLOSE = {"name": "close_ticket", "args": {"ticket_id": "T-100", "resolution": "fixed"}, "id": "c1"}


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Release, Dataset]:
    """A fresh ``release init`` release (its own package name: modules are cached per process)
    and the gate dataset it ships."""
    parent = tmp_path_factory.mktemp("derived")
    (parent / "data").mkdir()
    toolgate(["release", "init", "gate-probe-tools", "--dir", str(parent)], cli_env(parent / "data"))
    root = parent / "gate-probe-tools"
    release = load_release(f"{root / 'gate_probe_tools' / 'release.py'}:release")
    return release, load_dataset(root / "gate.jsonl")


@pytest.fixture(scope="module")
def own_gate(tickets: tuple[Release, Dataset]) -> GateResult:
    release, data = tickets
    return evaluate_gate(data, release, release)


@pytest.fixture
def runner(tickets: tuple[Release, Dataset]) -> Iterator[CaseRunner]:
    with CaseRunner(tickets[0]) as found:
        yield found


def case(**fields: Any) -> EvalCase:
    """A case of the ticket release (ada closes T-100 unless told otherwise)."""
    base: dict[str, Any] = {
        "id": "world-case",
        "category": "approval_bypass",
        "principal": "ada",
        "people": [ADA, BOB, SAM],
        "input": "Close T-100.",
        "turns": [[CLOSE]],
        "expected": {"status": None},
    }
    return EvalCase.model_validate({**base, **fields})


# ---------------------------------------------------------------- the gate on the release itself


def test_every_declaration_of_the_release_is_demonstrated_and_the_gate_passes(own_gate: GateResult) -> None:
    assert own_gate.passed, own_gate.failures()
    table = {str(row.target): row for row in own_gate.coverage_table()}
    assert set(table) == {
        "write:close_ticket",
        "read:get_ticket",
        "output:get_ticket",
        "rate_limit:per_principal_tool",
    }
    assert all(row.covered for row in table.values())
    assert table["write:close_ticket"].families == {
        "approval_required",
        "approved_once",
        "self_approval",
        "wrong_role",
        "expired",
        "stale_digest",
        "other_tenant_reviewer",
        "scope",
        "other_tenant",
        "other_user",
        "secret_argument",
    }
    assert table["read:get_ticket"].families == {"read_runs", "scope", "other_tenant", "other_user"}
    # every generated case held every claim on the release that declares it
    assert {name: run.broken for name, run in own_gate.candidate.derived.items() if run.broken} == {}
    assert own_gate.loosened() == {} and own_gate.unsafe_derived() == {}
    summary = lines(own_gate)[0]
    assert f"derived_cases={len(own_gate.derived)} loosened=0 uncovered=0 " in summary
    assert "coverage target=write:close_ticket releases=1 " in "\n".join(coverage_lines(own_gate))


def test_the_generated_cases_say_what_they_probe(own_gate: GateResult) -> None:
    by_id = {d.id: d for d in own_gate.derived}
    wrong = by_id["gate.wrong_role.close_ticket.support"]
    reviewers = [step.reviewer for step in wrong.case.approvals]
    # every role the release names or its dataset's people hold, but the approving one
    assert reviewers == ["gate-reviewer-customer", "gate-reviewer-gate_no_role"]
    run = own_gate.candidate.derived[wrong.id].observation
    assert [s["result"] for s in run.approvals] == ["missing_role", "missing_role"]
    assert run.handler_calls.get("close_ticket", 0) == 0
    expired = own_gate.candidate.derived["gate.expired.close_ticket.15min"].observation
    assert expired.approvals[0]["result"] == "expired" and expired.operations[0]["status"] == "expired"
    once = own_gate.candidate.derived["gate.approved_once.close_ticket.support"].observation
    assert once.handler_calls == {"close_ticket": 1} and once.duplicate_effects == 0  # delivered twice
    peer = by_id["gate.other_user.close_ticket.customer"]
    seed = next(c for c in own_gate.dataset.cases if c.id == peer.seed).turns[0][0]
    assert peer.case.principal == "gate-peer" and peer.case.turns[0][0].args == seed.args  # ada's ticket
    assert own_gate.candidate.derived[peer.id].observation.outcomes == {"g1": "not_owner"}


@pytest.mark.parametrize(
    ("mutant_id", "caught_by"),
    [
        ("write_declared_read:close_ticket", "gate.approval_required.close_ticket"),
        ("approval_widened:close_ticket:customer", "gate.wrong_role.close_ticket.support"),
        ("scope_dropped:close_ticket:tickets:write", "gate.scope.close_ticket.tickets-write-"),
        ("ownership_dropped:get_ticket", "gate.other_user.get_ticket.customer"),
        ("staff_widened:close_ticket:customer", "gate.other_user.close_ticket.customer"),
        ("resources_dropped:get_ticket", "gate.other_tenant.get_ticket"),
        ("output_bound_raised:get_ticket", "gate.output_bound.get_ticket.4096"),
        ("secrets_reviewed:close_ticket", "gate.secret_argument.close_ticket"),
        ("rate_limit_raised:per_principal_tool", "gate.rate_limit.per_principal_tool.60"),
        ("approval_window_extended:approval_minutes", "gate.expired.close_ticket.15min"),
    ],
)
def test_each_loosening_fails_the_gate_naming_the_case_the_control_refused(
    tickets: tuple[Release, Dataset], mutant_id: str, caught_by: str
) -> None:
    release, data = tickets
    with CaseRunner(release) as base:
        declarations = Declarations.of(release, base.registry)
        roles = union_roles([declarations], dataset_people(data.cases, base.people))
    mutant = next(m for m in mutants_of(declarations, roles) if m.id == mutant_id)
    loosened = mutant.apply(release, 1)
    result = evaluate_gate(data, loosened, release)
    assert result.candidate.facts.manifest_status == "verified"  # its own manifest: only behaviour tells
    assert not result.passed
    found = result.loosened()
    name = next((n for n in sorted(found) if n.startswith(caught_by)), None)  # some ids end in a hash
    assert name is not None, (mutant_id, sorted(found))
    assert any(f.startswith("loosened=") and name in f for f in result.failures())
    control = result.control
    assert control is not None and control.derived[name].broken == []  # the control demonstrated it


def test_a_dataset_that_seeds_no_write_leaves_it_uncovered_and_fails(
    tickets: tuple[Release, Dataset],
) -> None:
    release, data = tickets
    reads = Dataset(
        path=data.path, cases=tuple(c for c in data.cases if c.id == "ticket-read"), sha256=data.sha256
    )
    result = evaluate_gate(reads, release, release)
    assert not result.passed
    assert "uncovered=1 targets=write:close_ticket" in result.failures()
    table = "\n".join(coverage_lines(result))
    assert (
        "coverage target=write:close_ticket releases=1 cases=0 demonstrated=0 families=- UNCOVERED" in table
    )
    assert " uncovered=1 " in lines(result)[0]


def test_more_permissive_means_further_through_the_checks() -> None:
    assert stage("unauthorized") < stage("not_owner") < stage("policy_violation") < stage("proposal")
    assert stage("secret_in_arguments") < stage("unknown_tool")  # a response is screened before judging
    assert stage("proposal") < stage("accepted") == stage("failed")
    assert stage("budget_exhausted") is None  # decided outside the order: never compared

    def observed(**fields: Any) -> Observation:
        return Observation(case_id="x", release="r", thread_id="t", **fields)

    from toolgate.evals.derived_cases import DerivedCase, Target

    probe = DerivedCase(case(), Target("write", "close_ticket"), "approval_required", ())
    control = observed(
        outcomes={"g1": "not_owner"}, approvals=[{"step": 0, "result": "missing_role", "reviewer": "r"}]
    )
    same = observed(
        outcomes={"g1": "not_owner"}, approvals=[{"step": 0, "result": "missing_role", "reviewer": "r"}]
    )
    stricter = observed(outcomes={"g1": "unauthorized"})
    assert loosenings(probe, control, same) == [] and loosenings(probe, control, stricter) == []
    later = observed(outcomes={"g1": "semantic_invalid"})
    assert loosenings(probe, control, later) == ["g1: control not_owner, candidate semantic_invalid"]
    recorded = observed(
        outcomes={"g1": "not_owner"}, approvals=[{"step": 0, "result": "recorded", "reviewer": "r"}]
    )
    assert loosenings(probe, control, recorded) == [
        "review step 0 (r): control missing_role, candidate recorded"
    ]
    ran = observed(outcomes={"g1": "not_owner"}, handler_calls={"close_ticket": 1})
    assert loosenings(probe, control, ran) == ["close_ticket ran 1x, control 0x"]


# ---------------------------------------------------------------- the world a case runs in


def test_the_store_clock_stands_still_until_a_reviewer_decides_later(runner: CaseRunner) -> None:
    minutes = runner.release.policy.approval_minutes
    late = runner.run_case(
        case(approvals=[{"call_id": "c1", "reviewer": "sam", "after_minutes": minutes + 1}])
    )
    assert late.approvals[0]["result"] == "expired" and late.handler_calls == {}
    in_time = runner.run_case(
        case(approvals=[{"call_id": "c1", "reviewer": "sam", "after_minutes": minutes - 1}])
    )
    assert in_time.approvals[0]["result"] == "recorded"
    assert in_time.handler_calls == {"close_ticket": 1} and in_time.operations[0]["status"] == "succeeded"
    stale = runner.run_case(case(approvals=[{"call_id": "c1", "reviewer": "sam", "digest": "stale"}]))
    assert stale.approvals[0]["result"] == "digest_mismatch" and stale.handler_calls == {}


def test_a_case_store_clock_only_moves_forward(tmp_path: Path) -> None:
    store = CaseStore(tmp_path / "case.sqlite", key=b"k" * 32)
    start = store.now()
    assert store.now() == start  # it stands still
    store.advance_to(10)
    assert (store.now() - start).total_seconds() == 600
    store.advance_to(5)  # never backwards
    assert (store.now() - start).total_seconds() == 600


def test_a_cases_people_are_its_own(runner: CaseRunner) -> None:
    read_bob = [[{"name": "get_ticket", "args": {"ticket_id": "T-101"}, "id": "c1"}]]
    as_customer = runner.run_case(case(turns=read_bob))
    assert as_customer.outcomes == {"c1": "not_owner"}
    staff = {**ADA, "roles": ["support"]}  # in this case's world only, ada works in support
    as_support = runner.run_case(case(turns=read_bob, people=[staff, BOB, SAM]))
    assert as_support.outcomes == {"c1": "accepted"}
    assert runner.run_case(case(turns=read_bob)).outcomes == {"c1": "not_owner"}  # the next case: a customer


def test_a_rate_window_can_be_found_all_but_used(runner: CaseRunner) -> None:
    read = {"name": "get_ticket", "args": {"ticket_id": "T-100"}}
    limit = runner.release.policy.rate_limits.per_principal_tool
    assert limit is not None
    two = [[{**read, "id": "c1"}, {**read, "id": "c2"}]]
    used = {"kind": "rate_window_used", "window": "per_principal_tool", "count": limit.limit - 1}
    full = runner.run_case(case(turns=two, faults=[used], limits={"max_identical_calls": 4}))
    assert full.outcomes == {"c1": "accepted", "c2": "rate_limited"}
    fresh = runner.run_case(case(turns=two, limits={"max_identical_calls": 4}))
    assert fresh.outcomes == {"c1": "accepted", "c2": "accepted"}


def test_calls_copy_earlier_results_of_their_thread_or_of_someone_elses(runner: CaseRunner) -> None:
    read = {"name": "get_ticket", "args": {"ticket_id": "T-100"}, "id": "c1"}
    copy = {"name": "close_ticket", "args": {"resolution": "fixed"}, "id": "c2"}
    own = runner.run_case(case(turns=[[read], [{**copy, "from_results": {"ticket_id": "c1.ticket_id"}}]]))
    assert own.outcomes == {"c1": "accepted", "c2": "proposal"}
    assert own.arguments["c2"] == {"ticket_id": "T-100", "resolution": "fixed"}
    # bob presents the id ada's own session read: refused as another user's ticket
    theirs = case(
        principal="bob",
        prelude={"principal": "ada", "turns": [[read]]},
        turns=[[{**copy, "from_results": {"ticket_id": "prelude.c1.ticket_id"}}]],
    )
    presented = runner.run_case(theirs)
    assert presented.outcomes == {"c2": "not_owner"} and presented.handler_calls == {"get_ticket": 1}
    missing = runner.run_case(case(turns=[[{**copy, "id": "c3", "from_results": {}}]]))
    assert missing.outcomes == {"c3": "schema_invalid"}  # nothing to copy: the argument stays out


def test_a_result_grown_past_any_bound_reaches_the_model_cut_to_the_tools_bound(runner: CaseRunner) -> None:
    read = [[{"name": "get_ticket", "args": {"ticket_id": "T-100"}, "id": "c1"}]]
    grown = runner.run_case(case(turns=read, faults=[{"kind": "oversized_result", "tool": "get_ticket"}]))
    bound = runner.registry.tools["get_ticket"].max_output_bytes
    assert grown.truncated == ["c1"] and bound - 200 < grown.output_bytes["c1"] <= bound
    plain = runner.run_case(case(turns=read))
    assert plain.truncated == [] and plain.output_bytes["c1"] < 400


def test_forwarded_credentials_reach_the_handler_that_declares_them() -> None:
    lookup = [[{"name": "crm_lookup_contact", "args": {"contact_id": "C-100"}, "id": "c1"}]]
    with CaseRunner("ops-tools/1.1.0") as demo:
        signed_in = demo.run_case(
            case(principal="lee", people=[], turns=lookup, credentials={"crm_token": DEMO_CRM_TOKEN})
        )
        signed_out = demo.run_case(case(principal="lee", people=[], turns=lookup))
    assert signed_in.outcomes == {"c1": "accepted"}
    assert signed_out.outcomes == {"c1": "failed"}  # the CRM refuses a user with no session of theirs
    assert DEMO_CRM_TOKEN not in repr(signed_in.to_dict())  # never kept in what a run observed


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"turns": [[{**CLOSE, "from_results": {"ticket_id": "c9.ticket_id"}}]]},
            "copies from calls of no earlier turn",
        ),
        ({"people": [{"user_id": "x"}]}, "people need a tenant_id"),
        ({"people": [ADA, ADA]}, "people need distinct user_id values"),
        ({"faults": [{"kind": "rate_window_used", "window": "per_tenant"}]}, "needs a window and a count"),
        ({"faults": [{"kind": "oversized_result"}]}, "needs the tool whose result grows"),
    ],
)
def test_a_malformed_case_is_refused_naming_the_problem(change: dict[str, Any], message: str) -> None:
    line = case().model_dump() | change
    import json

    with pytest.raises(DatasetError, match=message):
        parse_line(json.dumps(line), 7)


def test_a_declaration_whose_cases_cannot_be_built_stays_uncovered_and_says_why(
    tickets: tuple[Release, Dataset], monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolgate.evals import derived_cases

    def broken(self: Any, spec: Any, seed: Any) -> list[Any]:
        raise ValueError("a seed this schema no longer accepts")

    monkeypatch.setattr(derived_cases._Builder, "write_cases", broken)
    release, data = tickets
    result = evaluate_gate(data, release, release)
    assert result.derive_problems == ["write:close_ticket: ValueError: a seed this schema no longer accepts"]
    assert "uncovered=1 targets=write:close_ticket" in result.failures() and not result.passed
    assert 'derive_problem="write:close_ticket: ValueError: a seed this schema no longer accepts"' in lines(
        result
    )


def test_opening_hours_are_probed_at_chosen_times_of_day(
    tickets: tuple[Release, Dataset], tmp_path: Path
) -> None:
    """A rule of opening hours: the case's clock is set inside and just after them (in the rule's
    time zone); every role but the exempt one is refused after hours; each loosening of it fails."""
    from dataclasses import replace
    from functools import partial

    from toolgate.evals.derived_cases import case_id
    from toolgate.evals.mutation import mutate
    from toolgate.graph.bootstrap import release_manifest
    from toolgate.policy.rules import PolicyRules
    from toolgate.releases.bundle import ReleaseEnv
    from toolgate.store.sqlite import SQLiteStore

    release, data = tickets
    # the ticket dataset's own cases pin no time of day; under a rule of opening hours they would
    # run at the host's time and fail after 18:00 in Paris, so they start at 13:30 there
    in_hours = "2030-01-15T12:30:00.000000Z"
    data = replace(
        data, cases=tuple(c.model_copy(update={"starts_at": c.starts_at or in_hours}) for c in data.cases)
    )
    hours = {
        "id": "tickets.office_hours",
        "tool": "close_ticket",
        "kind": "allowed_hours",
        "timezone": "Europe/Paris",
        "start": "09:00",
        "end": "18:00",
        "exempt_roles": ["support"],
        "reason": "Tickets are closed in office hours; tell the user support will do it tomorrow.",
    }
    document = {"schema_version": 1, "policy_version": "0.2.0", "approval_minutes": 15, "rules": [hours]}
    office = replace(
        release, id="gate-probe-tools/0.2.0", policy=PolicyRules.from_mapping(document), manifest=None
    )
    store = SQLiteStore(tmp_path / "specs.sqlite", key=b"k" * 32)
    office = replace(
        office, manifest=release_manifest(office, office.registry(ReleaseEnv(store, secret=b"k" * 32)))
    )
    store.close()

    result = evaluate_gate(data, office, office)
    assert result.passed, result.failures()
    table = {str(row.target): row for row in result.coverage_table()}
    assert table["rule:tickets.office_hours"].families == {"allowed_hours"}
    runs = result.candidate.derived
    probe = partial(case_id, "allowed_hours", "tickets.office_hours")
    inside = runs[probe("inside", "1230", "customer")].observation
    late = runs[probe("outside", "1701", "customer")].observation
    staff = runs[probe("outside", "1701", "support")].observation
    assert inside.outcomes == {"g1": "proposal"}  # 13:30 in Paris, 12:30 UTC
    assert late.outcomes == {"g1": "policy_violation"} and late.rules == {"g1": "tickets.office_hours"}
    assert staff.outcomes == {"g1": "proposal"}  # support is exempt
    by_id = {d.id: d for d in result.derived}
    late_case = by_id[probe("outside", "1701", "customer")].case
    assert late_case.starts_at == "2030-01-15T17:01:00.000000Z"  # 18:01 in Paris

    report = mutate(
        office, data, only=lambda m: m.kind in ("hours_extended", "exempt_role_added", "rule_removed")
    )
    assert report.base_failures == [] and report.score == 100.0
    assert {r.mutant.id for r in report.killed} == {
        "hours_extended:tickets.office_hours",
        "exempt_role_added:tickets.office_hours:customer",
        "rule_removed:tickets.office_hours",
    }
