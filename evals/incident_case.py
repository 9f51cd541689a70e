"""A production incident as an evaluation case: one task turn of a thread, read from records
that carry authority, made into a redacted `EvalCase` that replays in the real runner.

When: ``toolgate evals capture`` (`toolgate.evals.captured`) calls `read_incident`, then
`case_of`. Nothing here decides who may capture; it decides what is believed and what the case
says.

What is believed, and why:

- The thread's checkpointed state (messages, call records, budget, principal) only when its seal
  verifies (`toolgate.graph.seal`): checkpointed state is untrusted input, and a thread changed
  outside the gateway, or refused for it, is not captured (``state_tampered``).
- The store's records, each MAC-verified (``records_tampered`` otherwise): the thread's release
  pin, its proposals and their decisions, the requester's identity. They must agree with the
  state (``records_disagree`` otherwise): one tenant and requester, every proposal of the task
  named by a call record and every call record's proposal in the store.
- The audit log confirms what the case will expect: every refused call has its ``call.rejected``
  event with the same code, every read that ran its ``call.completed`` or ``call.failed``.

What the case holds, and why it replays (`toolgate.evals.runner.CaseRunner`):

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
- What the runner cannot replay an incident with is refused (``not_replayable``), never guessed:
  an edited proposal (a case has no edit step), an expired one (the runner has no clock to move),
  a rate-limited or stopped call, two runs of a tool that had a fault (a fault fires on a
  tool's first run only). An operation still ``approved`` or ``executing`` is ``not_settled``.
- Faults stand for what went wrong downstream: an unknown outcome or a dead letter is
  ``crash_before_effect`` (the replay's operation stays ``unknown``: a dead letter also needs a
  lapsed lease and a worker); a failed write or read is ``server_error``.
- ``expected`` is what trusted code did: call outcomes, the first refusal, the proposals, one
  handler run per read that ran and per write that executed, operation statuses (a dead letter as
  ``unknown``), and the thread's final status when the task turn is its last and the thread did
  not stop waiting for records that moved on without it (else None: not checked).
- ``critical`` for any refusal, fault or write; ``requires`` the release's tools the case uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import ValidationError

from toolgate.errors import REJECTION_CODES, STATE_CODES, StoreError, ToolgateUsageError
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
from toolgate.evals.observation import call_outcomes
from toolgate.graph.nodes._common import audit_call_id
from toolgate.graph.seal import tampered_keys
from toolgate.policy.output import redact_personal, redact_personal_text
from toolgate.policy.principal import Principal
from toolgate.store.audit_records import AuditEvent
from toolgate.store.base import Store
from toolgate.store.identity_records import IdentityRecord
from toolgate.store.records import ApprovalRecord, OperationRecord, ProposalRecord
from toolgate.store.thread_releases import ThreadReleases

SourceKind = Literal["thread", "operation", "proposal"]
"""What ``toolgate evals capture`` was given: a thread id, an operation key or a proposal id."""

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
BATCH_AUDITED = frozenset({"too_many_calls"})
"""Refusals audited once per turn, not per call (confirmed by their turn, not by call id)."""
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
FinalStatus = Literal["done", "awaiting_approval", "waiting", "needs_review"]
"""Final thread statuses a case can expect (``refused`` threads are never captured)."""
FINAL_STATUSES: tuple[FinalStatus, ...] = ("done", "awaiting_approval", "waiting", "needs_review")


class CaptureRefused(ToolgateUsageError):
    """A capture, review, edit or export was refused; ``code`` is stable (``not_found``,
    ``state_tampered``, ``self_review``, ...). Nothing was written but its audit event."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, kw_only=True)
class Incident:
    """The verified facts of one task turn of one thread."""

    thread_id: str
    tenant_id: str
    release: str
    """The release that served the thread (its pin; the sealed state's label before pins)."""
    task: int
    """Which task turn (1: the thread's first user message)."""
    requester: IdentityRecord
    """The requester as the identity store holds them (authentic)."""
    input: str
    responses: list[AIMessage]
    """The model's tool-calling responses of the task turn, in order."""
    final: str | None
    """The model's last words in the task turn (None: it ended waiting or without them)."""
    records: Mapping[str, Mapping[str, Any]]
    """The state's call records, by call id."""
    outcomes: Mapping[str, str]
    """Per call id: accepted, failed, proposal, not_run or the refusal code."""
    proposals: list[tuple[ProposalRecord, OperationRecord]]
    """The task turn's proposals with their operations, oldest first."""
    decisions: Mapping[str, list[ApprovalRecord]]
    """Recorded decisions per proposal id, in order."""
    operation_events: Mapping[str, list[AuditEvent]] = field(default_factory=dict)
    """Audit events per operation key."""
    status: FinalStatus | None = None
    """The final status to expect, or None (not checked; see the module docstring)."""
    budget: Mapping[str, Any] = field(default_factory=dict)


def _text(message: BaseMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(
        str(b.get("text", "")) if isinstance(b, dict) else str(b)
        for b in message.content
        if not isinstance(b, dict) or b.get("type") == "text"
    )


def _is_model(message: BaseMessage) -> TypeGuard[AIMessage]:
    return isinstance(message, AIMessage) and message.name != "toolgate"


def _calls(message: AIMessage) -> list[tuple[dict[str, Any], bool]]:
    """The response's calls as stored: parsed ones, then those moved aside or unparseable."""
    return [(dict(c), False) for c in message.tool_calls] + [
        (dict(c), True) for c in message.invalid_tool_calls
    ]


def _task_of(messages: Sequence[BaseMessage], focus_call: str | None) -> tuple[int, int, int]:
    """``(task number, first index, end index)`` of the task turn holding ``focus_call`` (the last
    task turn when None)."""
    starts = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    if not starts:
        raise CaptureRefused("not_found", "the thread holds no user message")
    index = len(messages) - 1
    if focus_call is not None:
        found = [
            i
            for i, m in enumerate(messages)
            if _is_model(m) and any(c.get("id") == focus_call for c, _ in _calls(m))
        ]
        if not found:
            raise CaptureRefused("records_disagree", "the thread's messages hold no call for that operation")
        index = found[0]
    number = max(1, sum(1 for start in starts if start <= index))
    first = starts[number - 1]
    end = starts[number] if number < len(starts) else len(messages)
    return number, first, end


def read_incident(
    store: Store, thread_id: str, values: Mapping[str, Any], *, focus_call: str | None
) -> Incident:
    """The verified facts of the task turn of ``thread_id`` holding ``focus_call`` (the last task
    turn when None), from its checkpointed ``values`` and the store; `CaptureRefused` otherwise."""
    messages: list[BaseMessage] = list(values.get("messages") or [])
    if not messages:
        raise CaptureRefused("not_found", f"no thread, operation or proposal {thread_id}")
    if tampered_keys(store.keys, thread_id, values) or values.get("status") == "refused":
        raise CaptureRefused("state_tampered", "the thread's saved state was changed outside the gateway")
    try:
        principal = Principal.from_dict(values["principal"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CaptureRefused("records_disagree", "the thread names no principal") from exc
    try:
        pin = ThreadReleases(store).get(thread_id)
    except StoreError:
        pin = None  # a store that never pinned a thread (release control not installed)
    if pin is not None and not pin.authentic:
        raise CaptureRefused("records_tampered", "the thread's release pin does not verify")
    if pin is not None and pin.tenant_id != principal.tenant_id:
        raise CaptureRefused("records_disagree", "the thread's release pin names another tenant")
    requester = store.get_identity(principal.user_id)
    if requester is None or requester.tenant_id != principal.tenant_id:
        raise CaptureRefused("records_disagree", "the thread's requester is not a person of its tenant")
    if not requester.authentic:
        raise CaptureRefused("records_tampered", "the requester's identity does not verify")
    task, first, end = _task_of(messages, focus_call)
    turn = messages[first:end]
    responses = [m for m in turn if _is_model(m) and _calls(m)]
    words = [m for m in turn if _is_model(m) and not _calls(m)]
    call_ids = [str(c.get("id") or "") for m in responses for c, _ in _calls(m)]
    records: Mapping[str, Mapping[str, Any]] = values.get("calls") or {}
    outcomes, _ = call_outcomes(dict(values))
    proposals = _proposals(store, thread_id, principal, call_ids, records)
    decisions = {p.proposal_id: _decisions(store, p) for p, _ in proposals}
    _confirm_calls(store, thread_id, call_ids, outcomes)
    operation_events = {
        p.operation_key: store.audit_events(operation_key=p.operation_key) for p, _ in proposals
    }
    status = _final_status(values.get("status"), last=end == len(messages), proposals=proposals)
    return Incident(
        thread_id=thread_id,
        tenant_id=principal.tenant_id,
        release=pin.release if pin is not None else str(values.get("release") or ""),
        task=task,
        requester=requester,
        input=_text(turn[0]),
        responses=responses,
        final=_text(words[-1]) if words else None,
        records=records,
        outcomes={c: outcomes.get(c, "not_run") for c in call_ids},
        proposals=proposals,
        decisions=decisions,
        operation_events=operation_events,
        status=status,
        budget=dict(values.get("budget") or {}),
    )


def _final_status(
    status: Any, *, last: bool, proposals: Sequence[tuple[ProposalRecord, OperationRecord]]
) -> FinalStatus | None:
    """The thread's status, when the case can expect it (see the module docstring)."""
    if not last:
        return None
    for known in FINAL_STATUSES:
        if status == known:
            if known == "awaiting_approval" and not any(
                op.status == "pending_approval" for _, op in proposals
            ):
                return None  # the operations moved on while the thread waited: how it ends is unknown
            return known
    return None


def _proposals(
    store: Store,
    thread_id: str,
    principal: Principal,
    call_ids: Sequence[str],
    records: Mapping[str, Mapping[str, Any]],
) -> list[tuple[ProposalRecord, OperationRecord]]:
    """The task turn's proposals, each authentic, of the thread's tenant and requester, and in
    one-to-one agreement with the call records."""
    mine = [(p, op) for p, op in store.list_proposals() if p.thread_id == thread_id and p.call_id in call_ids]
    for proposal, _ in mine:
        if not proposal.authentic:
            raise CaptureRefused("records_tampered", f"proposal {proposal.proposal_id} does not verify")
        if (proposal.tenant_id, proposal.requester_id) != (principal.tenant_id, principal.user_id):
            raise CaptureRefused(
                "records_disagree", f"proposal {proposal.proposal_id} names another requester"
            )
        if proposal.supersedes:
            raise CaptureRefused(
                "not_replayable", "a reviewer edited a proposal of this task: a case has no edit step"
            )
    stored = {p.proposal_id for p, _ in mine}
    named = {str(records[c]["proposal_id"]) for c in call_ids if records.get(c, {}).get("proposal_id")}
    if stored != named:
        raise CaptureRefused("records_disagree", "the thread's call records and the store's proposals differ")
    return mine


def _decisions(store: Store, proposal: ProposalRecord) -> list[ApprovalRecord]:
    found = store.decisions_for(proposal.proposal_id)
    if not all(d.authentic for d in found):
        raise CaptureRefused("records_tampered", f"a decision on {proposal.proposal_id} does not verify")
    return sorted(found, key=lambda d: d.decided_at)


def _confirm_calls(
    store: Store, thread_id: str, call_ids: Sequence[str], outcomes: Mapping[str, str]
) -> None:
    """Every refusal and every read that ran, as the state says, has its audit event."""
    audited = {audit_call_id(c): c for c in call_ids}
    events = [e for e in store.audit_events(call_ids=list(audited)) if e.thread_id == thread_id]
    seen = {(audited.get(e.call_id or ""), e.event, e.code) for e in events}
    for call_id in call_ids:
        outcome = outcomes.get(call_id, "not_run")
        if outcome in REJECTION_CODES and outcome not in BATCH_AUDITED:
            confirmed = (call_id, "call.rejected", outcome) in seen
        elif outcome == "accepted":
            confirmed = (call_id, "call.completed", None) in seen
        elif outcome == "failed":
            if not any(c == call_id and e == "call.failed" for c, e, _ in seen):
                raise CaptureRefused("not_replayable", f"read {call_id} failed before its handler ran")
            continue
        else:
            continue
        if not confirmed:
            raise CaptureRefused(
                "records_disagree", f"the audit log does not confirm call {call_id} ended {outcome}"
            )


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
        for call, invalid in _calls(response):
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
    "NOT_REPLAYABLE_CODES",
    "SCREEN_SURROGATES",
    "SURROGATE_SECRET",
    "CaptureRefused",
    "Incident",
    "SourceKind",
    "case_of",
    "read_incident",
]
