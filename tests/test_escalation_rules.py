"""Escalation rules as data (`toolgate.policy.escalation`): parsed strictly, raise only, ordered.

Pure: no store. The end-to-end behaviour (two reviewers above the threshold, the store's class
deciding) is tests/test_escalation.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from support import Harness

from toolgate.canonical import digest
from toolgate.errors import ApprovalError, ConfigurationError
from toolgate.policy.approvals import check_reviewer, effective_approval, evaluate_decisions
from toolgate.policy.escalation import check_escalations, escalate, parse_escalation
from toolgate.policy.rules import PolicyRules
from toolgate.testing import ScriptedChatModel, open_test_app
from toolgate.tools.spec import ApprovalClass

REFUND = ApprovalClass.two_person("support", "finance", sole_approver_roles=("finance",))
TWO = ApprovalClass.two_person("finance", "support")
RESTART = ApprovalClass.role("operator")


def rule(**overrides: Any) -> dict[str, Any]:
    return {
        "id": "refund.large",
        "tool": "issue_refund",
        "kind": "escalate",
        "field": "amount_cents",
        "over": 2000,
        "approval": "two_person(finance,support)",
        "reason": "large refund",
        **overrides,
    }


@pytest.mark.parametrize(
    "approval",
    [ApprovalClass.none(), RESTART, ApprovalClass.role("support", "finance"), REFUND, TWO],
)
def test_every_class_label_parses_back_to_its_class(approval: ApprovalClass) -> None:
    assert ApprovalClass.parse(approval.describe()) == approval


@pytest.mark.parametrize(
    "label", ["", "two_person()", "two_person(a;sole=)", "a,,b", "two_person(a", "a, b", "role;drop", "b,a"]
)
def test_a_malformed_label_is_refused(label: str) -> None:
    with pytest.raises(ValueError):
        ApprovalClass.parse(label)


def test_a_class_contains_another_only_when_every_way_to_satisfy_it_satisfies_the_other() -> None:
    assert TWO.at_least(REFUND) and not REFUND.at_least(TWO)
    assert ApprovalClass.role("finance").at_least(REFUND)  # finance approves refunds alone anyway
    assert not ApprovalClass.role("support").at_least(REFUND)  # one support reviewer was never enough
    assert not ApprovalClass.two_person("finance", "operator").at_least(REFUND)  # a new role: not a raise
    assert not ApprovalClass.none().at_least(RESTART) and RESTART.at_least(ApprovalClass.none())
    assert ApprovalClass.two_person("operator").at_least(RESTART) and RESTART.at_least(RESTART)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"over": None}, "exactly one of 'over' and 'in'"),
        ({"in": ["prod"]}, "exactly one of 'over' and 'in'"),
        ({"over": "2000"}, "'over' must be a number"),
        ({"over": True}, "'over' must be a number"),
        ({"over": None, "in": []}, "non-empty list of strings"),
        ({"reason": "  "}, "needs an id and a reason"),
        ({"approval": "two_person(finance"}, "not a list of role names"),
        ({"approval": "two_person(b,a)"}, "not an approval class label"),
        ({"field": None}, "field"),
    ],
)
def test_a_malformed_escalation_is_refused_when_the_policy_loads(
    overrides: dict[str, Any], message: str
) -> None:
    raw = {k: v for k, v in rule(**overrides).items() if v is not None}
    with pytest.raises(ConfigurationError, match=message):
        PolicyRules.from_mapping({"schema_version": 1, "policy_version": "p/1", "rules": [raw]})


def test_an_escalation_may_only_raise_and_must_name_a_tool_of_the_release() -> None:
    tools = {"issue_refund": REFUND, "restart_service": RESTART, "lookup_order": ApprovalClass.none()}
    check_escalations([parse_escalation(rule())], tools)
    lowering = parse_escalation(rule(approval="support"))
    with pytest.raises(ConfigurationError, match="would not raise issue_refund's approval class"):
        check_escalations([lowering], tools)
    with pytest.raises(ConfigurationError, match="would not raise lookup_order"):
        check_escalations([parse_escalation(rule(tool="lookup_order", approval="finance"))], tools)
    unknown = parse_escalation(rule(tool="issue_refnud"))
    with pytest.raises(ConfigurationError, match="unknown tool 'issue_refnud'"):
        check_escalations([unknown], tools)
    check_escalations([unknown], tools, unknown_ok=True)  # a registry holding part of a release
    apart = [parse_escalation(rule()), parse_escalation(rule(id="b", approval="finance"))]
    with pytest.raises(ConfigurationError, match="neither of which contains the other"):
        check_escalations(apart, tools)


def test_a_gateway_is_not_built_on_a_policy_that_would_lower_a_class(harness: Harness) -> None:
    policy = PolicyRules.from_mapping(
        {"schema_version": 1, "policy_version": "p/1", "rules": [rule(approval="support")]}
    )
    with pytest.raises(ConfigurationError, match="would not raise"):
        open_test_app(
            model=ScriptedChatModel(responses=[]),
            tools=harness.registry,
            policy=policy,
            store=harness.store,
            start=False,
        )


def test_the_strongest_matching_rule_decides_and_conditions_read_the_judged_arguments() -> None:
    stronger = ApprovalClass.two_person("finance")
    rules = [
        parse_escalation(rule()),
        parse_escalation(rule(id="refund.huge", over=9000, approval="two_person(finance)", reason="huge")),
        parse_escalation(rule(id="x.prod", field="target.env", over=None, **{"in": ["production"]})),
    ]
    assert escalate(rules, "issue_refund", REFUND, {"amount_cents": 2000}).rule_id is None
    assert escalate(rules, "issue_refund", REFUND, {"amount_cents": 2001}).approval == TWO
    huge = escalate(rules, "issue_refund", REFUND, {"amount_cents": 9001})
    assert (huge.approval, huge.rule_id, huge.reason) == (stronger, "refund.huge", "huge")
    for odd in ({"amount_cents": "99999"}, {"amount_cents": True}, {}, {"amount": 99999}):
        assert escalate(rules, "issue_refund", REFUND, odd).approval == REFUND  # no match, no change
    prod = escalate(rules, "issue_refund", REFUND, {"target": {"env": "production"}})
    assert prod.rule_id == "x.prod" and prod.approval == TWO
    assert escalate(rules, "issue_refund", REFUND, {"target": {"env": "staging"}}).rule_id is None
    assert escalate(rules, "restart_service", RESTART, {"amount_cents": 99999}).approval == RESTART


def test_the_class_on_the_record_applies_and_one_below_the_required_class_authorizes_nothing(
    harness: Harness,
) -> None:
    from datetime import UTC, datetime, timedelta

    from support import principal

    from toolgate.store.records import ProposalRecord

    now = datetime.now(UTC)
    record = ProposalRecord(
        proposal_id="prop_x",
        operation_key="op_x",
        thread_id="t",
        call_id="c",
        tool="issue_refund",
        tool_version="1",
        handler_revision="r",
        release="ops-tools/1.0.0",
        tenant_id="acme",
        requester_id="cust-ada",
        arguments={"amount_cents": 2500},
        arguments_sha256="",
        digest="",
        risk="danger",
        effect="refund",
        rollback="none",
        approval_class=TWO.describe(),
        created_at=now.isoformat(),
        expires_at=(now + timedelta(minutes=15)).isoformat(),
    )
    raised = dataclasses.replace(record, digest=digest(record.content()))
    assert effective_approval(raised, REFUND) == TWO
    lowered = dataclasses.replace(raised, approval_class=REFUND.describe())
    lowered = dataclasses.replace(lowered, digest=digest(lowered.content()))
    assert effective_approval(lowered, TWO) is None
    with pytest.raises(ApprovalError) as refusal:
        check_reviewer(
            lowered,
            TWO,
            principal("fiona"),
            seen_digest=None,
            now=now,
            expires_at=now + timedelta(minutes=15),
        )
    assert refusal.value.code == "approval_class_invalid"
    assert evaluate_decisions(lowered, TWO, []).status == "pending"
