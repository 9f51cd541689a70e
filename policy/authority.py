"""The authority: whether a tool call may go on, asked at three checkpoints and answered each time
from the same rules.

A call is judged when the model proposes it, again when execute is about to run it, and (a write)
again right before its claim, because time and hands pass between the three: checkpointed state is
writable by clients, grants and reviewers change, an order changes hands, a release is replaced.
One `Authority` per gateway (built by `toolgate.graph.builder.build_gateway` from the release's
registry and policy rules and the store's identity directory, auditor and rate limiter) answers
all three. Each checkpoint is a call into the same rule methods below, the subset that applies at
that moment:

| rule (method) | `at_dispatch` | `at_execute` | `before_claim` |
| --- | --- | --- | --- |
| who acts (`acting_principal`; the requester, re-read) | thread's principal | thread's principal | ``requester_inactive`` |
| tool in this release (`tool`) | ``unknown_tool`` | ``state_mismatch`` | ``tool_not_in_release`` |
| visibility: scopes, roles, tenant (`visibility`) | ``unauthorized`` | reads | the requester's |
| retirement (`retirement`) | ``tool_deprecated`` | - | - |
| no identity in arguments (`smuggled_identity`) | ``identity_in_arguments`` | - | - |
| path arguments under the tool's roots (`outside_roots`) | ``path_not_allowed`` | reads | ``path_not_allowed`` |
| caller fields name the caller (`caller_mismatch`) | ``caller_mismatch`` | reads | - |
| ownership of each resource (`ownership`) | ``cross_tenant``, ``not_owner`` | reads | the requester's |
| business policy (`business_policy`) | ``policy_violation`` | - | the requester's, now |
| the call is its proposal's (`proposal_binding`) | - | writes | ``proposal_missing``, ``forged_proposal``, |
| | | | ``operation_mismatch`` |
| decisions that still count (`counted_decisions`) | - | - | ``forged_approval``, ``reviewer_inactive``, |
| | | | ``reviewer_role_removed`` |
| approval valid (`approval_validity`) | - | - | ``approval_invalid`` |
| approval expiry (`expired`, the store's clock) | - | - | asked by the executor first |

Execute refuses with ``state_mismatch`` what the state recorded wrongly; ownership refuses a
missing id as ``semantic_invalid``; the approval's validity covers its digest, its pin to release
and handler revision, its class, separation of duties and quorum.

Why each rule runs where it does:

- **At dispatch** the model's proposal meets every rule that can refuse it before anything
  exists: the fixed order of `at_dispatch` interleaves them with the checks of the call's shape
  (JSON, schema, repetition, rate limit, cross-field validation), and the first failure decides.
- **At execute** nothing runs because checkpointed state says so: a read is judged again for the
  thread's principal (visibility and ownership can change between two nodes, and the state that
  names the call is client-writable); a write only has to be the call of its stored proposal,
  proposed in this thread, for this tenant and requester, since `before_claim` judges it next.
  Retirement and business policy are not asked again: a call accepted inside the window finishes.
  The execute node asks for a read's ownership to be looked up in front of its handler, on the
  handler's own worker (``defer_ownership``; `toolgate.tools.loaded_code.start_checked`): the
  same lookups judged the same way, right before the handler, in one hop to loaded code instead
  of two. The read's slots (admission, breaker, handler) are taken first, so a read refused one
  of those is answered with that refusal before its ownership is looked up again; nothing runs.
- **Before the claim** of an approved write, the approval is judged again from the store alone:
  the proposal row (its MAC, its digest, its pin to release and handler revision, its approval
  class), the decisions that still count (an approver revoked, moved out of the tenant or
  stripped of the role since no longer counts), the requester (revoked, disabled or moved out of
  the tenant since: the write does not run), and what the requester may still do, judged with
  their identity as it is now and the store's time: the tool's scopes and roles (a role taken
  away since), the business rules (a rule of hours the write is now outside of, the limit of the
  roles they still hold) and their hold on every resource (an order that changed hands since
  approval is not touched). The write runs on the requester's authority as much as on the
  reviewers': what they could no longer propose does not run, and stays approved (a rule of
  hours may allow it later, until the approval expires). An approval past its expiry is not
  refused but moved to ``expired`` by the executor (`expired`, on the store's clock, a state
  change with its own event), and the claim's conditional update asks the database's clock once
  more.

Authority comes only from the authenticated principal and the store's records: nothing here reads
an identity from model arguments, and what checkpointed state says of a call (`RecordedCall`) is a
claim checked against the store, never a grant. Time is the store's (`Store.now`), never a
worker's clock. Refusals at dispatch and execute are values the nodes answer and audit with the
turn's trace fields; a refusal before the claim answers nobody but the operator, so the authority
audits it itself (never on a read-only store: a verification run reports, it never writes).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from toolgate.canonical import canonical_json, sha256_hex
from toolgate.clock import parse_iso
from toolgate.errors import IdentityError, ToolExecutionError
from toolgate.policy.approvals import ApprovalVerdict, verify_for_execution
from toolgate.policy.authorization import (
    OwnershipLookups,
    check_resource,
    check_scopes,
    closest_visible,
)
from toolgate.policy.decisions import Rejection
from toolgate.policy.identities import IdentityDirectory, IdentitySnapshot
from toolgate.policy.output import redact_text, redacted_traceback
from toolgate.policy.principal import Principal
from toolgate.policy.ratelimit import InboundRateLimiter
from toolgate.policy.rules import PolicyRules
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.records import ApprovalRecord, OperationRecord, ProposalRecord
from toolgate.store.snapshots import GuardSnapshot
from toolgate.tools import loaded_code
from toolgate.tools.argpaths import values_at
from toolgate.tools.paths import path_problem
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ArgumentsInvalid, HandlerContext, ToolSpec

log = logging.getLogger(__name__)

MAX_ERRORS_SHOWN = 5
STATE_MISMATCH = Rejection(
    code="state_mismatch",
    message="Not run: this call does not match the gateway's own records for this task.",
    retryable=False,
)
DELIVERY_REFUSED = "delivery.refused"
"""The event of a delivery refused because its tool or proposal is gone (audited once)."""
TOOL_NOT_IN_RELEASE = "tool_not_in_release"
PROPOSAL_MISSING = "proposal_missing"
REQUESTER_INACTIVE = "requester_inactive"


# ---- values ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProposedCall:
    """One call as the model emitted it, before any judgement."""

    call_id: str
    name: str
    args: Any
    parse_error: str | None


@dataclass(frozen=True)
class Verdict:
    """What the authority decided about one call at dispatch or at execute."""

    spec: ToolSpec | None
    arguments: dict[str, Any]
    rejection: Rejection | None
    """None: the call may go on."""
    fingerprint: str = ""
    """The call's identity for loop detection (dispatch only)."""
    ownership: OwnershipLookups | None = None
    """A read's ownership lookups still to run, in front of its handler (execute with
    ``defer_ownership`` only; None: judged already, or nothing to look up)."""


@dataclass(frozen=True, kw_only=True)
class RecordedCall:
    """What checkpointed state says of one call of the turn: claims to check, never a grant."""

    call_id: str
    tool: str
    read: bool
    """Recorded as a read (else as a proposed write)."""
    arguments: Mapping[str, Any]
    operation_key: str | None = None
    proposal_id: str | None = None


@dataclass(frozen=True)
class ClaimRefusal:
    """Why an approved write may not be claimed now."""

    code: str
    """Stable code (``tool_not_in_release``, ``forged_proposal``, ``approval_invalid``, ...)."""
    reason: str
    """What the delivery reports (`toolgate.graph.delivery.result.Delivery.reason`)."""


# ---- rules without dependencies ----------------------------------------------------------


def acting_principal(
    recorded: Mapping[str, Any] | None, given: Principal | None, *, new_turn: bool = False
) -> Principal:
    """Who acts in a thread: the first principal recorded in its state, which later runs cannot
    replace; ``given`` (the run's authenticated principal) only for a thread that has none yet.

    Someone else may only carry a turn on (a reviewer resuming the approval interrupt of their own
    tenant); a new turn, with new user input, belongs to the thread's principal alone."""
    if recorded:
        principal = Principal.from_dict(recorded)
        other = given is not None and (given.user_id, given.tenant_id) != (
            principal.user_id,
            principal.tenant_id,
        )
        if other and (new_turn or (given is not None and given.tenant_id != principal.tenant_id)):
            raise IdentityError("this thread belongs to another principal", code="thread_owner")
        return principal
    if given is None:
        raise IdentityError("no authenticated principal in the run context", code="missing_principal")
    return given


def retirement(spec: ToolSpec, now: datetime) -> Rejection | None:
    """``tool_deprecated`` once a deprecated tool's window has ended (``now``: the store's clock)."""
    found = spec.deprecation
    if found is None or found.state(now) != "retired":
        return None
    instead = f" Use {found.replacement} instead." if found.replacement else ""
    return Rejection(
        code="tool_deprecated",
        retryable=found.replacement is not None,  # only another tool can succeed
        message=f"This tool was retired at {found.sunset_at.isoformat()}.{instead}",
        suggestion=f"call {found.replacement}" if found.replacement else None,
    )


def smuggled_identity(spec: ToolSpec, args: Mapping[str, Any]) -> Rejection | None:
    """``identity_in_arguments`` when the model supplied identity or authority fields: those come
    from the signed-in session, never from arguments."""
    smuggled = sorted(set(spec.identity_keys(args)))
    if not smuggled:
        return None
    return Rejection(
        code="identity_in_arguments",
        retryable=False,
        message="Identity and authority come from the signed-in session, never from arguments. "
        f"Remove: {', '.join(redact_text(k)[:40] for k in smuggled[:5])}.",
    )


def outside_roots(spec: ToolSpec, arguments: Mapping[str, Any]) -> Rejection | None:
    """``path_not_allowed`` when a path argument climbs out with ``..`` or resolves (symlinks
    followed) outside the tool's allow-listed roots (`toolgate.tools.paths`). Judged again for a
    read at execute and for a write before its claim: a symlink can change in between."""
    if not spec.path_arguments:
        return None
    problem = path_problem(spec.file_roots, spec.path_arguments, arguments)
    if problem is None:
        return None
    return Rejection(code="path_not_allowed", retryable=False, message=f"Refused: {problem}.")


def caller_mismatch(spec: ToolSpec, principal: Principal, arguments: Mapping[str, Any]) -> Rejection | None:
    """``caller_mismatch`` when a field the operator declared as the caller (`ToolSpec.caller_fields`)
    holds anything but the signed-in person's own id: identity checked by meaning, not by name."""
    for path in sorted(spec.caller_fields):
        if any(value != principal.user_id for value in values_at(arguments, path)):
            return Rejection(
                code="caller_mismatch",
                retryable=False,
                message=f"{redact_text(path)[:60]} names the caller: only the signed-in person's own id is"
                " accepted there.",
            )
    return None


def proposal_binding(
    proposal: ProposalRecord | None, spec: ToolSpec, call: RecordedCall, principal: Principal, thread_id: str
) -> bool:
    """Whether ``call`` (as checkpointed state records it) is the call of its stored ``proposal``:
    the same operation and call, proposed in ``thread_id`` for ``principal``'s tenant by them."""
    return (
        proposal is not None
        and proposal.operation_key == call.operation_key
        and proposal.thread_id == thread_id
        and proposal.tenant_id == principal.tenant_id
        and proposal.requester_id == principal.user_id
        and proposal.tool == spec.name
        and proposal.call_id == call.call_id
    )


def describe_invalid(exc: ArgumentsInvalid) -> str:
    """Field path and constraint for each problem, never the input values or a stack trace."""
    problems = [f"{path}: {problem}" for path, problem in exc.problems]
    more = f" (+{len(problems) - MAX_ERRORS_SHOWN} more)" if len(problems) > MAX_ERRORS_SHOWN else ""
    return redact_text("Invalid arguments: " + "; ".join(problems[:MAX_ERRORS_SHOWN]) + more)[:600]


def call_fingerprint(tool: str, arguments: dict[str, Any]) -> str:
    """Identity of a call for loop detection: tool name and canonical arguments."""
    return sha256_hex(canonical_json({"tool": tool, "args": arguments}))[:24]


# ---- the authority -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Authority:
    """The rules of one release and the three checkpoints that ask them (see the module)."""

    registry: Registry
    """The release's tools, with the ownership resolver of its system of record."""
    policy: PolicyRules
    """The release's business rules."""
    store: Store
    """Decisions, identities and the clock every time decision is made by."""
    auditor: Auditor
    """Records the refusals made before a claim."""
    directory: IdentityDirectory
    """Tells whether an approver or a requester is still an active identity of the tenant."""
    rate_limiter: InboundRateLimiter
    """Counts each call judged at dispatch (a peek counts nothing)."""

    # ---- rules -------------------------------------------------------------------------

    def tool(self, name: str, tenant_id: str | None = None) -> ToolSpec | None:
        """The tool ``name`` of this release: the shared spec (what dispatch judges), or with a
        ``tenant_id`` (the principal's or the operation row's, never an argument's) the one that
        runs for that tenant; None when the release has no such tool."""
        return self.registry.get(name) if tenant_id is None else self.registry.get_for(name, tenant_id)

    def visibility(self, spec: ToolSpec, principal: Principal) -> Rejection | None:
        """``unauthorized`` unless ``principal`` may see ``spec`` (scopes, roles, tenant)."""
        return check_scopes(spec, principal)

    def ownership(
        self, spec: ToolSpec, principal: Principal, arguments: Mapping[str, Any]
    ) -> Rejection | None:
        """Every resource the call names, resolved for ``principal`` in the system of record
        (``cross_tenant``, ``not_owner``, or a missing id as ``semantic_invalid``)."""
        return check_resource(spec, principal, arguments, self.registry.resolver)

    def business_policy(
        self, spec: ToolSpec, principal: Principal, arguments: Mapping[str, Any], now: datetime
    ) -> Rejection | None:
        """The release's business rules (``policy_violation``, first violated rule wins)."""
        decision = self.policy.evaluate(spec.name, spec.is_write, principal, arguments, now)
        if decision.kind == "deny":
            assert decision.rejection is not None
            return decision.rejection
        return None

    def expired(self, proposal: ProposalRecord, now: datetime | None = None) -> bool:
        """Whether the proposal's approval window has ended, by the store's clock (``now``: the
        time the calling step already read from the store; None: read it here)."""
        return (self.store.now() if now is None else now) >= parse_iso(proposal.expires_at)

    def counted_decisions(
        self,
        proposal: ProposalRecord,
        decisions: Sequence[ApprovalRecord] | None = None,
        people: IdentitySnapshot | None = None,
    ) -> list[ApprovalRecord]:
        """The proposal's decisions that may count: authentic records by reviewers who are still
        active identities reviewing for the proposal's tenant (its own people or staff), each with
        only the recorded roles its reviewer still holds. Every other one is audited and dropped
        (``forged_approval``, ``reviewer_inactive``, ``reviewer_role_removed``). The review door
        and the operator's verify command count decisions this same way.

        ``decisions`` and ``people``: the proposal's decisions and the identities of their
        reviewers as the caller has just read them (else both are read here: the decisions, then
        every reviewer's identity in one statement)."""
        if decisions is None:
            decisions = self.store.approvals.for_proposal(proposal.proposal_id)
        if people is None:
            people = self.directory.read(d.reviewer_id for d in decisions)
        counted: list[ApprovalRecord] = []
        for decision in decisions:
            reviewer = people.reviewer_for(decision.reviewer_id, proposal.tenant_id)
            # a decision counts with the roles its reviewer held then and still holds now
            kept = tuple(r for r in decision.reviewer_roles if reviewer is not None and r in reviewer.roles)
            if not decision.authentic:
                code = "forged_approval"
            elif reviewer is None:
                code = "reviewer_inactive"
            elif not kept:
                code = "reviewer_role_removed"
            else:
                counted.append(replace(decision, reviewer_roles=kept))
                continue
            if self.store.read_only:  # a verification run reports, it never writes
                continue
            self.auditor.record(
                "approval.voided",
                "refused",
                code=code,
                proposal_id=proposal.proposal_id,
                operation_key=proposal.operation_key,
                tool=proposal.tool,
                detail={"approval_id": decision.approval_id},
            )
        return counted

    def approval_validity(
        self,
        spec: ToolSpec,
        proposal: ProposalRecord,
        decisions: Sequence[ApprovalRecord] | None = None,
        people: IdentitySnapshot | None = None,
    ) -> ApprovalVerdict:
        """The approval judged again from the decisions that still count (`counted_decisions`,
        with its ``decisions`` and ``people``): digest, release and handler revision pin,
        approval class, separation of duties and quorum."""
        return verify_for_execution(
            proposal,
            spec.approval,
            self.counted_decisions(proposal, decisions, people),
            handler_revision=spec.handler_revision,
            release=self.registry.release,
        )

    # ---- checkpoints -------------------------------------------------------------------

    def at_dispatch(
        self,
        principal: Principal,
        call: ProposedCall,
        *,
        counts: dict[str, int],
        max_identical_calls: int,
        now: datetime | None = None,
        peek: bool = False,
    ) -> Verdict:
        """Judge one call the model proposed (or a reviewer's edit, or a rollback, both as calls by
        the original requester); the first failing check decides. The order: tool in release,
        visibility, retirement, JSON shape, identity fields, schema, repetition, ownership,
        inbound rate limit (the tool's own window included), cross-field validation, business
        policy. ``now`` is the store's clock (None: read it here). ``peek`` judges without counting
        the call against any rate limit (a shadow judgement writes nothing anywhere)."""
        now = self.store.now() if now is None else now
        spec = self.tool(call.name)
        if spec is None:
            suggestion = closest_visible(self.registry, call.name, principal, now)
            return Verdict(
                None,
                {},
                Rejection(
                    code="unknown_tool",
                    message="No tool with that name is available.",
                    retryable=True,
                    suggestion=f"did you mean {suggestion!r}?" if suggestion else None,
                ),
            )
        refused = self.visibility(spec, principal) or retirement(spec, now)
        if refused:
            return Verdict(spec, {}, refused)
        if call.parse_error is not None or not isinstance(call.args, dict):
            return Verdict(
                spec,
                {},
                Rejection(
                    code="malformed_arguments",
                    message="Arguments must be one JSON object matching the tool schema.",
                    retryable=True,
                ),
            )
        refused = smuggled_identity(spec, call.args)
        if refused:
            return Verdict(spec, {}, refused)
        try:
            arguments = spec.parse_arguments(call.args)
        except ArgumentsInvalid as exc:
            if exc.code == "undeclared_argument":  # a key the published schema leaves open, not opened
                rejection = Rejection(
                    code="undeclared_argument", message=describe_invalid(exc), retryable=True
                )
            else:
                rejection = Rejection(code="schema_invalid", message=describe_invalid(exc), retryable=True)
            return Verdict(spec, {}, rejection)
        except Exception as exc:  # the tool's argument model's own code (a validator, a serializer) raised
            log.warning("arguments of %s could not be judged:\n%s", spec.name, redacted_traceback(exc))
            return Verdict(spec, {}, unchecked(spec))
        refused = caller_mismatch(spec, principal, arguments)
        if refused:
            return Verdict(spec, arguments, refused)
        fingerprint = call_fingerprint(spec.name, arguments)
        refused = outside_roots(spec, arguments)
        if refused:
            return Verdict(spec, arguments, refused, fingerprint)
        if not spec.pollable and counts.get(fingerprint, 0) >= max_identical_calls:
            return Verdict(
                spec,
                arguments,
                Rejection(
                    code="loop_detected",
                    retryable=False,
                    message="This exact call was already made in this task; a person will review the task.",
                ),
                fingerprint,
            )
        refused = self.ownership(spec, principal, arguments)
        if refused:
            return Verdict(spec, arguments, refused, fingerprint)
        limiter = self.rate_limiter.peek if peek else self.rate_limiter.check
        refused = limiter(principal, spec.name, spec.rate_limit)
        if refused:
            return Verdict(spec, arguments, refused, fingerprint)
        if spec.semantic_check is not None:
            refused = semantic_refusal(spec, principal, arguments)
            if refused:
                return Verdict(spec, arguments, refused, fingerprint)
        refused = self.business_policy(spec, principal, arguments, now)
        return Verdict(spec, arguments, refused, fingerprint)

    def at_execute(
        self,
        principal: Principal,
        call: RecordedCall,
        *,
        thread_id: str,
        proposal: ProposalRecord | None,
        defer_ownership: bool = False,
    ) -> Verdict:
        """Judge a call of the turn again before execute runs it (``spec`` of the verdict: the
        tool as it runs for the principal's tenant). A read runs only for a tool that is a read
        in this release and that ``principal`` may use on these resources now; a write only
        through the stored ``proposal`` the call names (read from the store by the caller), made
        in ``thread_id`` for this tenant and requester, for this tool and call. Anything else is
        ``state_mismatch``: the state does not match the gateway's records.

        ``defer_ownership``: a read's ownership is not looked up here but handed back
        (`Verdict.ownership`) for the executor to look up in front of the handler, in the
        handler's own hop to loaded code, and judged the same way
        (`toolgate.policy.authorization.OwnershipRefused`)."""
        spec = self.tool(call.tool, principal.tenant_id)  # the tenant's own, if any
        arguments = dict(call.arguments)
        if call.read:
            if spec is None or spec.is_write:
                return Verdict(spec, arguments, STATE_MISMATCH)
            refused = (
                self.visibility(spec, principal)
                or outside_roots(spec, arguments)
                or caller_mismatch(spec, principal, arguments)
            )
            if refused is not None or not defer_ownership:
                return Verdict(spec, arguments, refused or self.ownership(spec, principal, arguments))
            lookups = OwnershipLookups.of(spec, principal, arguments, self.registry.resolver)
            return Verdict(spec, arguments, None, ownership=lookups if lookups.resources else None)
        if (
            spec is None
            or not spec.is_write
            or not proposal_binding(proposal, spec, call, principal, thread_id)
        ):
            return Verdict(spec, arguments, STATE_MISMATCH)
        return Verdict(spec, arguments, None)

    def before_claim(
        self,
        op: OperationRecord,
        proposal: ProposalRecord | None,
        now: datetime | None = None,
        snapshot: GuardSnapshot | None = None,
    ) -> ClaimRefusal | None:
        """Judge an approved operation right before its claim (None: it may be claimed).
        ``proposal`` is the store's row ``op`` names (None when it names none or the store holds
        none); ``now`` the store's time the caller just read (else it is read here); ``snapshot``
        the decisions and identities the delivery read with ``op`` in one statement
        (`toolgate.store.snapshots.Snapshots.for_claim`; None: read that here). Every refusal is
        audited: a missing tool or proposal once per operation, code and release (a worker
        re-picks the operation on every pass, and identical events would bury the one that
        matters), any other each time."""
        spec = self.tool(op.tool, op.tenant_id)
        if spec is None:
            reason = f"tool {op.tool!r} is not in release {self.registry.release}"
            return self._missing(op, TOOL_NOT_IN_RELEASE, reason)
        if proposal is None:
            return self._missing(op, PROPOSAL_MISSING, "proposal missing")
        if not proposal.authentic:
            # its row's MAC does not verify: inserted with database access alone (or before
            # proposals carried a MAC); nothing it says is trusted, its approvals included
            return self._refused(op, "forged_proposal", "the proposal's MAC does not verify")
        if (proposal.operation_key, proposal.tool, proposal.tenant_id) != (
            op.operation_key,
            op.tool,
            op.tenant_id,
        ):
            # operation rows carry no MAC: one that names another operation's proposal (inserted or
            # re-pointed with database access) may not borrow its approvals and run it again
            return self._refused(op, "operation_mismatch", "the operation is not its proposal's own")
        # the decisions and the identities of their reviewers and of the requester, read in one
        # statement: each judged from the store as it is right before the claim
        if (
            snapshot is None
            or snapshot.operation is None
            or snapshot.operation.operation_key != op.operation_key
        ):
            snapshot = self.store.snapshots.for_claim(op.operation_key, clock=now is None)
        now = now or snapshot.now  # the store's time, read with the snapshot when the caller had none
        people = IdentitySnapshot(snapshot.identities)
        verdict = self.approval_validity(spec, proposal, snapshot.decisions, people)
        if verdict.status != "approved":
            refused = self._refused(op, "approval_invalid", verdict.reason)
            return ClaimRefusal(refused.code, verdict.reason)
        requester = people.active(proposal.requester_id, proposal.tenant_id)
        if requester is None:
            # the write runs on its requester's authority as much as on its reviewers': once they
            # are revoked, disabled or moved out of the tenant (or their record does not verify),
            # it does not run, as an edit of their proposal is refused (`graph.review.edits`)
            return self._refused(op, REQUESTER_INACTIVE, "the requester is no longer an active identity")
        # what the requester may do is judged again as it stands now: a role or scope taken away
        # since the proposal (the tool is no longer theirs), a business rule the write now breaks
        # (hours it is outside of, a limit of the roles they still hold), a resource no longer
        # theirs; the operation stays approved (a rule of hours may allow it later)
        refusal = (
            self.visibility(spec, requester)
            # a path that resolved under the roots when it was approved may not now: a symlink
            # swapped in since (hours may pass) would have the handler write outside them
            or outside_roots(spec, proposal.arguments)
            or self.business_policy(
                spec, requester, proposal.arguments, self.store.now() if now is None else now
            )
            or self.ownership(spec, requester, proposal.arguments)
        )
        if refusal is None:
            return None
        if not self.store.read_only:
            self.auditor.record(
                "operation.refused",
                "refused",
                code=refusal.code,
                operation_key=proposal.operation_key,
                proposal_id=proposal.proposal_id,
                tool=proposal.tool,
                detail={"stage": "execute"},
            )
        return ClaimRefusal(refusal.code, f"{refusal.code}: {refusal.message}")

    # ---- audit of refusals before a claim ----------------------------------------------

    def _refused(self, op: OperationRecord, code: str, reason: str) -> ClaimRefusal:
        """Audit ``approval.refused_at_execution`` (``code``, ``reason``) for ``op``; the refusal
        reports ``code: reason``."""
        if not self.store.read_only:
            self.auditor.record(
                "approval.refused_at_execution",
                "refused",
                code=code,
                operation_key=op.operation_key,
                proposal_id=op.proposal_id,
                tool=op.tool,
                detail={"reason": reason},
            )
        return ClaimRefusal(code, f"{code}: {reason}")

    def _missing(self, op: OperationRecord, code: str, reason: str) -> ClaimRefusal:
        """Audit ``delivery.refused`` (``code``) for ``op`` unless this release already did (the
        store's record of the operation decides the tenant); the refusal reports ``reason``."""
        store = self.store
        # one indexed row at most (`store.audit.first`), never the operation's whole trail
        if not store.read_only and not store.audit.first(
            op.operation_key, DELIVERY_REFUSED, code=code, tool_release=self.auditor.release
        ):
            self.auditor.record(
                DELIVERY_REFUSED,
                "refused",
                code=code,
                operation_key=op.operation_key,
                proposal_id=op.proposal_id,
                tool=op.tool,
                tenant_id=op.tenant_id,
                detail={"reason": reason, "tenant_id": op.tenant_id},
            )
        return ClaimRefusal(code, reason)



class CheckUnanswered(Exception):
    """A tool's semantic check raised (anything but a `ToolExecutionError`), overran its deadline
    (``timed_out``) or answered something that is neither None nor text."""

    def __init__(self, *, timed_out: bool) -> None:
        super().__init__("the semantic check did not answer")
        self.timed_out = timed_out


def semantic_problem(spec: ToolSpec, arguments: Mapping[str, Any], ctx: HandlerContext) -> str | None:
    """What the tool's own semantic check finds wrong with judged ``arguments`` for ``ctx``'s
    tenant and user: the text it returns, or a `ToolExecutionError`'s message; None when it
    passes. Raises `CheckUnanswered`.

    The check, and the handler arguments it is given (the tool's argument model), are loaded
    code, run through its boundary (`toolgate.tools.loaded_code.lookup`: a worker thread under
    `LOOKUP_TIMEOUT_S`); a failure's traceback is logged redacted, and of what it answers only a
    text's characters are read (a subclass's own methods never run)."""
    check = spec.semantic_check
    assert check is not None

    def checked(kept: Mapping[str, Any], ctx: HandlerContext) -> Any:
        return check(spec.handler_arguments(kept), ctx)

    try:
        problem: Any = loaded_code.lookup(checked, arguments, ctx)
    except ToolExecutionError as exc:  # the check's own finding (e.g. the order is gone)
        problem = exc.message
    except TimeoutError:
        log.warning("semantic check of %s did not answer in time", spec.name)
        raise CheckUnanswered(timed_out=True) from None
    except Exception as exc:  # loaded code failed (`HandlerAborted` included): closed
        log.warning("semantic check of %s failed:\n%s", spec.name, redacted_traceback(exc))
        raise CheckUnanswered(timed_out=False) from None
    if problem is None:
        return None
    if not isinstance(problem, str):
        log.warning("semantic check of %s answered neither None nor text", spec.name)
        raise CheckUnanswered(timed_out=False)
    return str.__str__(problem) or None


def semantic_refusal(spec: ToolSpec, principal: Principal, arguments: Mapping[str, Any]) -> Rejection | None:
    """The tool's semantic check of judged ``arguments``, as ``principal``, at dispatch:
    ``semantic_invalid`` with the problem it names (redacted), or ``check_failed``, retryable,
    with nothing of what it said, when it did not answer (`semantic_problem`). Run inline, a
    check that raised failed the whole run with its message, and one that hung held dispatch
    with no deadline."""
    ctx = HandlerContext(tenant_id=principal.tenant_id, user_id=principal.user_id)
    try:
        problem = semantic_problem(spec, arguments, ctx)
    except CheckUnanswered:
        return unchecked(spec)
    if problem is None:
        return None
    return Rejection(code="semantic_invalid", message=redact_text(problem)[:300], retryable=True)


def unchecked(spec: ToolSpec) -> Rejection:
    """``check_failed``: the tool's own code that judges a call (its argument model's validators
    and serializers, its semantic check) raised, overran its deadline or answered nonsense; the
    call is refused, retryable, with nothing of what it said."""
    return Rejection(
        code="check_failed",
        message=f"The rules of {spec.name} cannot be checked right now. Tell the user to try again later.",
        retryable=True,
    )


__all__ = [
    "DELIVERY_REFUSED",
    "PROPOSAL_MISSING",
    "STATE_MISMATCH",
    "TOOL_NOT_IN_RELEASE",
    "Authority",
    "CheckUnanswered",
    "ClaimRefusal",
    "ProposedCall",
    "RecordedCall",
    "Verdict",
    "acting_principal",
    "call_fingerprint",
    "describe_invalid",
    "outside_roots",
    "proposal_binding",
    "retirement",
    "semantic_problem",
    "semantic_refusal",
    "smuggled_identity",
    "unchecked",
]
