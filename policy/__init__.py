"""Trusted decisions: principal, authorization, business rules, approval rules, output sanitizing."""

from toolgate.policy.approvals import (
    ApprovalVerdict,
    check_reviewer,
    evaluate_decisions,
    proposal_digest_valid,
    verify_for_execution,
)
from toolgate.policy.authorization import check_resource, check_scopes
from toolgate.policy.decisions import Decision, Rejection
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.output import bound, redact, redact_text, sanitize_result
from toolgate.policy.principal import Principal
from toolgate.policy.rules import MaxValueRule, PolicyRules

__all__ = [
    "ApprovalVerdict",
    "Decision",
    "IdentityDirectory",
    "MaxValueRule",
    "PolicyRules",
    "Principal",
    "Rejection",
    "bound",
    "check_resource",
    "check_reviewer",
    "check_scopes",
    "evaluate_decisions",
    "proposal_digest_valid",
    "redact",
    "redact_text",
    "sanitize_result",
    "verify_for_execution",
]
