"""A production incident as an evaluation case: the verified facts of one task turn
(`toolgate.evals.captured.incident_records`) made into a redacted `EvalCase` that replays in the real
runner (`toolgate.evals.runner.CaseRunner`) against the release that served the thread.

- ``input`` is the user's message that started the task turn, ``turns`` the model's tool-calling
  responses of that turn with the same call ids, ``final`` the model's last words. Every string
  and argument is redacted: secrets, tokens, card numbers and e-mail addresses
  (`toolgate.policy.output.redact_personal`).
- A call that screening moved aside (`toolgate.graph.nodes._bounds`) kept no arguments in state;
  the case gives it a surrogate that screening refuses the same way (`SCREEN_SURROGATES`; for a
  secret, `SURROGATE_SECRET`, which looks like a key and is nobody's).
- The principal is inline, with the requester's tenant, roles and scopes as the identity store
  holds them. A person of the replay's world (`toolgate.evals.runner.default_people`, whose ids
  the release's seed data names, e.g. as order owners) keeps their id; anyone else becomes
  ``user-<keyed hash>``: stable within one store, meaningless without its secret.
- Each recorded decision becomes an approval step by a stand-in from the replay's world who
  reviews for the proposal's tenant and holds every role the reviewer held when deciding (the
  reviewer themself when they are such a person); reviewers' ids are not kept otherwise.
- Faults stand for what went wrong downstream: an unknown outcome or a dead letter is
  ``crash_before_effect`` (the replay's operation stays ``unknown``: a dead letter also needs a
  lapsed lease and a worker); a failed write or read is ``server_error``.
- ``expected`` is what trusted code did: call outcomes, the first refusal, the proposals, one
  handler run per read that ran and per write that executed, operation statuses (a dead letter
  as ``unknown``) and the final status (`toolgate.evals.captured.incident_records`).
- ``critical`` for any refusal, fault or write; ``requires`` the release's tools the case uses.
- What the runner cannot replay is refused (``not_replayable``), never guessed: an edited
  proposal (a case has no edit step), an expired one (the runner has no clock to move), a
  rate-limited or stopped call, two runs of a tool that had a fault (a fault fires on a tool's
  first run only). An operation still ``approved`` or ``executing`` is ``not_settled``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from toolgate.errors import REJECTION_CODES, STATE_CODES
from toolgate.evals.captured.incident_records import CaptureRefused, Incident, model_calls
from toolgate.evals.fixtures import (
    ApprovalStep,
    Category,
    EvalCase,
    Expected,
    Fault,
    FaultKind,
    Limits,
    ScriptedCall,
)
from toolgate.policy.output import redact_personal, redact_personal_text
from toolgate.policy.principal import Principal
from toolgate.store.records import ApprovalRecord

SURROGATE_SECRET = "sk-toolgate-surrogate-not-a-secret"
"""Stands for a secret that screening kept out of state: it looks like an API key, so the replay
is screened as the incident was, and it is nobody's key."""
SCREEN_SURROGATES: dict[str, dict[str, Any]] = {
    "secret_in_arguments": {"value": SURROGATE_SECRET},
    "number_out_of_range": {"value": 2**64},
    "nul_character": {"value": "\x00"},
}
"""Arguments screening refuses with each code, for calls it moved aside (their real arguments
never entered state). Other screened calls replay from the preview state keeps."""
NOT_REPLAYABLE_CODES = frozenset({"rate_limited", "task_stopped", "non_finite_number", *STATE_CODES})
"""Refusals a case cannot reproduce: earlier load, a stopped rollout, a NaN (JSON holds none),
tampered state."""
CATEGORY_OF_REFUSAL: dict[str, Category] = {
    "cross_tenant": "cross_tenant",
    "not_owner": "cross_user",
    "budget_exhausted": "loops_and_budgets",
    "loop_detected": "loops_and_budgets",
    "too_many_calls": "loops_and_budgets",
}
"""Refusal codes with a category of their own; any other refusal is ``refusal``."""
UNKNOWN_OUTCOMES = frozenset({"unknown", "dead_lettered"})
UNSETTLED = frozenset({"approved", "executing"})


@dataclass
class _Plan:
    """What the replay must run and may fault, per tool."""

    runs: Counter[str] = field(default_factory=Counter)
    faults: dict[str, FaultKind] = field(default_factory=dict)
    operations: list[str] = field(default_factory=list)

    def fault(self, tool: str, kind: FaultKind) -> None:
        if tool in self.faults:
            raise CaptureRefused(
                "not_replayable", f"two faults of {tool}: the runner faults a tool's first run only"
            )
        self.faults[tool] = kind

    def check(self) -> None:
        for tool in self.faults:
            if self.runs[tool] != 1:
                raise CaptureRefused(
                    "not_replayable",
                    f"{tool} ran {self.runs[tool]} times with a fault: the runner faults its first run only",
                )


def _plan(incident: Incident) -> _Plan:
    """Handler runs, faults and operation statuses the replay must show."""
    plan = _Plan()
    for call_id, outcome in incident.outcomes.items():
        tool = str(incident.records.get(call_id, {}).get("tool") or "")
        if outcome in ("accepted", "failed"):
            plan.runs[tool] += 1
        if outcome == "failed":
            plan.fault(tool, "server_error")
    for proposal, op in incident.proposals:
        events = incident.operation_events.get(proposal.operation_key, [])
        if op.status == "expired":
            raise CaptureRefused(
                "not_replayable", f"{proposal.proposal_id} expired: the runner has no clock to move"
            )
        if op.status in UNSETTLED:
            raise CaptureRefused(
                "not_settled", f"operation {op.operation_key} is still {op.status}: capture it once settled"
            )
        started = any(e.event == "handler.started" for e in events)
        if op.status in UNKNOWN_OUTCOMES or any(e.event == "operation.dead_lettered" for e in events):
            plan.fault(op.tool, "crash_before_effect")
            plan.runs[op.tool] += 1
            plan.operations.append("unknown")
        elif op.status == "failed":
            if not started:
                raise CaptureRefused(
                    "not_replayable", f"operation {op.operation_key} failed before its handler ran"
                )
            plan.fault(op.tool, "server_error")
            plan.runs[op.tool] += 1
            plan.operations.append("failed")
        else:
            plan.runs[op.tool] += int(op.status == "succeeded")
            plan.operations.append(op.status)
    plan.check()
    return plan


def _scripted(incident: Incident) -> list[list[ScriptedCall]]:
    turns = []
    for response in incident.responses:
        turn = []
        for call, invalid in model_calls(response):
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                raise CaptureRefused("not_replayable", "a tool call without an id cannot be replayed")
            name = redact_personal_text(str(call.get("name") or ""))
            code = str(incident.records.get(call_id, {}).get("code") or "")
            if invalid and code in SCREEN_SURROGATES:
                turn.append(ScriptedCall(name=name, args=SCREEN_SURROGATES[code], id=call_id))
            elif invalid:
                turn.append(
                    ScriptedCall(name=name, raw=redact_personal_text(str(call.get("args") or "")), id=call_id)
                )
            else:
                turn.append(ScriptedCall(name=name, args=redact_personal(call.get("args")), id=call_id))
        turns.append(turn)
    return turns


class _StandIns:
    """Reviewers replaced by people of the replay's world (see the module docstring)."""

    def __init__(self, people: Mapping[str, Principal], requester: str) -> None:
        self.people, self.requester = people, requester
        self.chosen: dict[str, str] = {}

    def __call__(self, decision: ApprovalRecord, tenant_id: str) -> str:
        known = self.chosen.get(decision.reviewer_id)
        if known is not None:
            return known
        taken = set(self.chosen.values()) | {self.requester}
        fits = [
            user_id
            for user_id, person in sorted(
                self.people.items(), key=lambda kv: (kv[0] != decision.reviewer_id, kv[0])
            )
            if user_id not in taken
            and person.reviews_for(tenant_id)
            and set(decision.reviewer_roles) <= person.roles
        ]
        if not fits:
            roles = ", ".join(sorted(decision.reviewer_roles)) or "none"
            raise CaptureRefused(
                "not_replayable", f"nobody in the replay's world reviews for {tenant_id} with roles {roles}"
            )
        self.chosen[decision.reviewer_id] = fits[0]
        return fits[0]


def _principal(
    incident: Incident, people: Mapping[str, Principal], pseudonym: Callable[[str], str]
) -> dict[str, Any]:
    requester = incident.requester
    known = people.get(requester.user_id)
    keep = known is not None and known.tenant_id == requester.tenant_id
    return {
        "user_id": requester.user_id if keep else pseudonym(requester.user_id),
        "tenant_id": requester.tenant_id,
        "roles": sorted(requester.roles),
        "scopes": sorted(requester.scopes),
    }


def _category(incident: Incident, plan: _Plan, refusal: str | None) -> Category:
    if any(kind == "crash_before_effect" for kind in plan.faults.values()):
        return "unknown_outcome"
    if refusal is not None:
        return CATEGORY_OF_REFUSAL.get(refusal, "refusal")
    if incident.proposals:
        return "approval_bypass"
    return "tool_selection" if incident.outcomes else "no_tool"


def case_of(
    incident: Incident,
    *,
    case_id: str,
    people: Mapping[str, Principal],
    pseudonym: Callable[[str], str],
    known_tools: frozenset[str],
    note: str,
) -> EvalCase:
    """The redacted, replayable case of ``incident`` (see the module docstring)."""
    bad = sorted({o for o in incident.outcomes.values() if o in NOT_REPLAYABLE_CODES})
    if bad:
        raise CaptureRefused(
            "not_replayable", f"the task has calls refused with {', '.join(bad)}: not reproducible"
        )
    plan = _plan(incident)
    principal = _principal(incident, people, pseudonym)
    stand_in = _StandIns(people, principal["user_id"])
    approvals = [
        ApprovalStep(
            call_id=proposal.call_id,
            reviewer=stand_in(decision, proposal.tenant_id),
            decision=decision.decision,
            reason=redact_personal_text(decision.reason),
        )
        for proposal, _ in incident.proposals
        for decision in incident.decisions.get(proposal.proposal_id, [])
    ]
    turns = _scripted(incident)
    refusal = next((o for o in incident.outcomes.values() if o in REJECTION_CODES), None)
    names = {c.id: c.name for turn in turns for c in turn}
    first = next((c for c, o in incident.outcomes.items() if o in ("accepted", "failed", "proposal")), None)
    kept = incident.records.get(first, {}).get("arguments") if first else None
    tools = {str(incident.records.get(c, {}).get("tool") or "") for c in incident.outcomes}
    budget = {k: incident.budget.get(k) for k in Limits.model_fields if k in incident.budget}
    critical = bool(refusal or plan.faults or incident.proposals)
    try:
        return EvalCase(
            id=case_id,
            category=_category(incident, plan, refusal),
            critical=critical,
            principal=principal,
            input=redact_personal_text(incident.input),
            turns=turns,
            final=redact_personal_text(incident.final) if incident.final else "Done.",
            approvals=approvals,
            faults=[Fault(kind=kind, tool=tool) for tool, kind in sorted(plan.faults.items())],
            limits=Limits(**budget),
            expected=Expected(
                tool=names.get(first) if first else None,
                arguments=redact_personal(dict(kept)) if isinstance(kept, Mapping) else None,
                refusal=refusal,
                calls=dict(incident.outcomes),
                proposals=len(incident.proposals),
                handler_calls={t: n for t, n in sorted(plan.runs.items()) if n},
                status=incident.status,
                operations=sorted(plan.operations),
            ),
            requires=sorted((tools | {p.tool for p, _ in incident.proposals}) & known_tools),
            note=redact_personal_text(note),
        )
    except ValidationError as exc:
        raise CaptureRefused(
            "not_replayable", f"the incident is no valid case: {exc.errors()[0]['msg']}"
        ) from exc


__all__ = [
    "CATEGORY_OF_REFUSAL",
    "NOT_REPLAYABLE_CODES",
    "SCREEN_SURROGATES",
    "SURROGATE_SECRET",
    "case_of",
]
