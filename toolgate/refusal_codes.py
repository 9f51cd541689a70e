"""Every stable code toolgate answers a refused or failed tool call, delivery, decision or request
with: what it means, whether retrying can help, and which checkpoint says it.

One list for the model, clients, reviewers and operators, so a code is looked up in one place and
added in one place. `tests/test_refusal_codes.py` reads the source and fails when code emits a
code that is not listed here (naming file and line), when an emitter's constant ``retryable``
disagrees with the entry, or when an entry has no evaluation case that provokes it (a dataset
case in ``evals/dataset/`` or an adversarial case in ``evals/adversarial/``) and no test file
named in ``covered_by`` that mentions it.

A module of its own, beside `toolgate.errors` rather than in it: errors.py holds the exception
classes callers catch, this holds data about the codes those exceptions (and the refusal values
that are not exceptions) carry, and it grows by one row per code. The ``refusal`` family's codes
are also the closed type `RejectionCode` (defined here, next to its rows, and re-exported by
`toolgate.errors` as before), so adding a refusal code touches this module, its emitter and its
case. Retryability lives here: an emitter that states a constant ``retryable`` next to a literal
code must agree with its row (the test checks); a row whose retryability depends on the
occurrence says None.

Families, as the tree tells them apart:

- ``refusal``: a model's tool call refused before any handler runs
  (`toolgate.policy.decisions.Rejection`), answered in a `ToolMessage` (``"error": code``) and
  audited as ``call.rejected``;
- ``delivery``: an approved write refused right before its claim (nothing is claimed, the
  operation stays ``approved``), audited for operators;
- ``execution``: why a handler's run failed or its outcome is unknown
  (`toolgate.errors.ToolExecutionError.kind`, an operation's ``error["kind"]``);
- ``approval``: a reviewer's decision, edit, rollback or dead-letter resolution refused
  (`toolgate.errors.ApprovalError.code`);
- ``request``: a client's request or run refused: who is acting or what they sent
  (`toolgate.errors.IdentityError.code`, `toolgate.errors.RunRefused.code`, HTTP API error bodies);
- ``release``: a release-control command refused, or a task stopped because its release was
  (`toolgate.errors.ReleaseControlError.code`).

Not listed: audit-only event codes that refuse nothing (``handler_crash``, ``slot_lost``,
``edit_lost_race``...), the model provider's own refusal kinds (`toolgate.policy.refusals`), the
codes of configuration and bundle problems raised before anything runs (`ModelUnavailable`,
`RegistryError.problems`; the errors' own class codes, which the CLI prints, are listed) and
the evaluation harness's own refusals (``evals/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

RejectionCode = Literal[
    "unknown_tool",
    "malformed_arguments",
    "schema_invalid",
    "semantic_invalid",
    "identity_in_arguments",
    "cross_tenant",
    "not_owner",
    "unauthorized",
    "rate_limited",
    "policy_violation",
    "budget_exhausted",
    "loop_detected",
    "too_many_calls",
    "non_finite_number",
    "number_out_of_range",
    "nul_character",
    "secret_in_arguments",
    "state_tampered",
    "state_mismatch",
    "task_stopped",
    "tool_deprecated",
    "resolver_failed",
    "check_failed",
    "path_not_allowed",
    "undeclared_argument",
    "caller_mismatch",
]
"""The closed set of reasons a tool call is refused before any handler runs for it: the codes of
the ``refusal`` family below, as a type (`toolgate.errors` re-exports it; a test keeps the two
lists equal, so a new refusal code is one line here and one row)."""

Family = Literal["refusal", "delivery", "execution", "approval", "request", "release"]
FAMILIES: tuple[Family, ...] = ("refusal", "delivery", "execution", "approval", "request", "release")


@dataclass(frozen=True, kw_only=True)
class CodeEntry:
    """One code of one family."""

    code: str
    """The stable machine-readable word, e.g. ``unknown_tool``."""
    family: Family
    """Which kind of refusal it is (see the module)."""
    owner: str
    """The checkpoint or subsystem that emits it: ``dispatch``, ``execute``, ``state``,
    ``delivery``, ``handler``, ``executor``, ``recovery``, ``admission``, ``approval``,
    ``review``, ``hitl``, ``server``, ``auth``, ``identity``, ``release``, ``cli`` (an error's
    class code, `toolgate.errors.ToolgateError.code`, as ``error=CODE`` on the command line)."""
    retryable: bool | None
    """Whether trying again can succeed, in the sense the refusal itself reports it: for a
    ``refusal`` whether the model may succeed with a corrected call (`Rejection.retryable`), for an
    ``execution`` kind whether the same call may be tried again later, otherwise whether the same
    request can succeed later without anyone changing records or rights. None: the emitter decides
    per occurrence (a read's timeout may be retried, a write's is an unknown outcome)."""
    meaning: str
    """One line: what happened."""
    covered_by: str | None = None
    """For a code no evaluation case can provoke (a tampered row, an HTTP body, an operator
    command): the test file, relative to the repository, that provokes it and names it."""


class _Row(NamedTuple):
    """One line of the catalog, before its family is added."""

    code: str
    owner: str
    retryable: bool | None
    meaning: str
    covered_by: str | None = None


def _family(family: Family, *rows: _Row) -> tuple[CodeEntry, ...]:
    return tuple(CodeEntry(family=family, **row._asdict()) for row in rows)


# fmt: off
CATALOG: tuple[CodeEntry, ...] = (
    *_family(
        "refusal",
        _Row(
            "unknown_tool", "dispatch", True,
            "No tool of that name is offered to this principal (a look-alike name gets a 'did you mean').",
        ),
        _Row(
            "malformed_arguments", "dispatch", True,
            "The arguments are not one JSON object within the size and nesting limits.",
        ),
        _Row("schema_invalid", "dispatch", True, "The arguments do not match the tool's schema."),
        _Row(
            "semantic_invalid", "dispatch", True,
            "The arguments break a business rule or name a resource that does not exist.",
        ),
        _Row(
            "identity_in_arguments", "dispatch", False,
            "The model supplied identity or authority fields (tenant, user, roles) that only trusted code"
            " sets.",
        ),
        _Row("cross_tenant", "dispatch", False, "A resource the call names belongs to another tenant."),
        _Row(
            "not_owner", "dispatch", False,
            "A resource the call names belongs to another user of the tenant.",
        ),
        _Row(
            "unauthorized", "dispatch", False,
            "The principal lacks the scope or role the tool needs (before the claim of an approved"
            " write: its requester, as they stand now; the write stays approved).",
        ),
        _Row(
            "rate_limited", "dispatch", True,
            "An inbound rate limit is used up; try again after the window.",
        ),
        _Row(
            "policy_violation", "dispatch", False,
            "An operator policy rule denies the call (before the claim of an approved write: judged"
            " again with its requester's roles and the store's time; the write stays approved).",
        ),
        _Row("budget_exhausted", "dispatch", False, "The task's tool-call budget is spent."),
        _Row(
            "loop_detected", "dispatch", False,
            "The same tool was called with the same arguments too many times.",
        ),
        _Row(
            "too_many_calls", "dispatch", True,
            "More calls in one turn than the gateway judges; make fewer at a time.",
        ),
        _Row("non_finite_number", "dispatch", True, "An argument is NaN or Infinity."),
        _Row("number_out_of_range", "dispatch", True, "An integer argument does not fit in 64 bits."),
        _Row("nul_character", "dispatch", True, "A name, argument or call id holds a NUL character."),
        _Row(
            "secret_in_arguments", "dispatch", True,
            "An argument looks like a secret (key, password, token, card number).",
        ),
        _Row(
            "state_tampered", "state", False,
            "The task's checkpointed state was changed outside the gateway; nothing more runs in it.",
            "tests/test_state_tampering.py",
        ),
        _Row(
            "state_mismatch", "execute", False,
            "A call in checkpointed state does not match the gateway's own records for the task.",
            "tests/test_state_tampering.py",
        ),
        _Row("task_stopped", "release", False, "The task's release no longer serves it; start a new task."),
        _Row(
            "tool_deprecated", "dispatch", None,
            "The tool's deprecation window has ended (retryable when a replacement tool is named).",
        ),
        _Row(
            "resolver_failed", "dispatch", True,
            "The release's ownership check raised instead of answering; the call is refused (fail "
            "closed), at dispatch, at execute or before the claim, and may succeed later.",
            "tests/test_hostile_resolver.py",
        ),
        _Row(
            "check_failed", "dispatch", True,
            "The tool's own code that judges a call (its semantic check, its argument model's "
            "validators) raised, overran its deadline or answered something that is not a problem "
            "text; the call is refused (fail closed) and may succeed later.",
            "tests/test_hostile_semantic_check.py",
        ),
        _Row(
            "path_not_allowed", "dispatch", False,
            "A path argument climbs out with '..' or resolves (symlinks followed) outside the tool's "
            "allow-listed roots; refused before any handler runs (before the claim of an approved"
            " write: judged again, a symlink swapped in since; the write stays approved).",
        ),
        _Row(
            "undeclared_argument", "dispatch", True,
            "A key the tool's published schema does not declare, at a place the operator did not name"
            " open (closed by default at every depth).",
            "tests/test_published_tools.py",
        ),
        _Row(
            "caller_mismatch", "dispatch", False,
            "An argument the operator declared as the caller names someone other than the signed-in"
            " person.",
            "tests/test_published_tools.py",
        ),
    ),
    *_family(
        "delivery",
        _Row(
            "forged_proposal", "delivery", False,
            "The proposal's MAC does not verify: its row was written without the gateway.",
            "tests/test_proposal_mac.py",
        ),
        _Row(
            "operation_mismatch", "delivery", False,
            "The operation row names a proposal that is not its own.",
            "tests/test_red_team_rows.py",
        ),
        _Row(
            "approval_invalid", "delivery", False,
            "The decisions that still count no longer approve the proposal.",
            "tests/test_red_team_decisions.py",
        ),
        _Row(
            "forged_approval", "delivery", False,
            "An approval record's MAC does not verify; the decision is dropped.",
            "tests/test_identities.py",
        ),
        _Row(
            "reviewer_inactive", "delivery", False,
            "An approving reviewer is no longer an active identity; the decision is dropped.",
            "tests/test_identities.py",
        ),
        _Row(
            "requester_inactive", "delivery", False,
            "The approved write's requester is no longer an active identity of its tenant; it does not run"
            " (nor does a status check of their waited job with their sealed credentials).",
            "tests/test_identities.py",
        ),
        _Row(
            "reviewer_role_removed", "delivery", False,
            "An approving reviewer no longer holds the role they approved with; the decision is dropped.",
            "tests/test_red_team_decisions.py",
        ),
        _Row(
            "tool_not_in_release", "delivery", True,
            "This process's release has no such tool for the tenant; another worker may deliver it.",
            "tests/test_delivery_refusals.py",
        ),
        _Row(
            "proposal_missing", "delivery", False,
            "The operation names no proposal, or one the store does not hold.",
            "tests/test_delivery_refusals.py",
        ),
        _Row(
            "unresolved", "delivery", False,
            "An unknown outcome's status checks never found its effect: dead-lettered for a person.",
            "tests/test_worker_run.py",
        ),
        _Row(
            "status_check_broke", "delivery", False,
            "An unknown outcome's status check raised (loaded code broke); after the last of its "
            "schedule the operation is dead-lettered for a person (each broken check audited).",
            "tests/test_worker_run.py",
        ),
    ),
    *_family(
        "execution",
        _Row(
            "caller_error", "handler", False,
            "The arguments name something the downstream does not have or refuses; the model may fix "
            "them.",
            "tests/test_demo_tools.py",
        ),
        _Row(
            "server_error", "handler", None,
            "The downstream failed; no argument change helps.",
            "tests/test_handler_failures.py",
        ),
        _Row(
            "result_invalid", "handler", False,
            "The handler's result cannot be bounded and serialized (not JSON, cyclic, too deep); that "
            "call fails, never the run.",
            "tests/test_result_invalid.py",
        ),
        _Row(
            "tool_drifted", "handler", False,
            "An MCP tool no longer matches the pin it was loaded and reviewed with (its server lists it "
            "changed, or not at all); refused before the call, until an operator reloads it and reviews "
            "the release.",
            "tests/test_mcp_drift.py",
        ),
        _Row(
            "timeout", "handler", None,
            "The handler did not answer in time; for a write the outcome is unknown and is reconciled.",
            "tests/test_handler_failures.py",
        ),
        _Row(
            "credential_refused", "handler", False,
            "A forwarded or service credential was refused (forged, expired, other audience or tenant).",
            "tests/test_handler_delegation.py",
        ),
        _Row(
            "credential_missing", "handler", False,
            "A credential the tool declares was not forwarded for this user.",
            "tests/test_handler_credentials.py",
        ),
        _Row(
            "interrupted", "executor", False,
            "The worker shut down while the handler ran; the outcome is unknown and recovery "
            "reconciles it at once (the lease is given up).",
            "tests/test_hostile_release.py",
        ),
        _Row(
            "resource_busy", "executor", True,
            "Another write to the same resource is running; try again.",
            "tests/test_same_resource.py",
        ),
        _Row(
            "worker_lost", "recovery", False,
            "The worker that claimed the write lost its lease before an outcome was stored.",
            "tests/test_leases.py",
        ),
        _Row(
            "resolved_failed", "review", False,
            "A person settled a dead-lettered write as failed.",
            "tests/test_dead_letter_resolution.py",
        ),
        _Row(
            "handler_busy", "executor", True,
            "The tool's handler already runs its max_concurrency calls at once; nothing ran (a write "
            "stays approved); try again shortly.",
            "tests/test_handler_concurrency.py",
        ),
        _Row(
            "overloaded", "admission", True,
            "No free execution slot; try again after retry_after_s.",
            "tests/test_overload.py",
        ),
    ),
    *_family(
        "approval",
        _Row("self_approval", "approval", False, "The requester cannot review their own proposal."),
        _Row(
            "missing_role", "approval", False,
            "The reviewer lacks every role the tool's approval class names.",
        ),
        _Row("already_decided", "review", False, "This reviewer already decided this proposal."),
        _Row(
            "not_pending", "review", False,
            "The proposal is no longer pending (decided, edited or expired).",
        ),
        _Row(
            "cross_tenant", "approval", False,
            "The reviewer (or the rollback request) belongs to another tenant.",
        ),
        _Row(
            "digest_mismatch", "approval", False,
            "The digest the reviewer saw is not the proposal's digest.",
        ),
        _Row(
            "digest_required", "approval", False,
            "A resume approved a reviewer's edit without the digest the reviewer saw: a resume names "
            "no interrupt, so a bare approve from an older view would approve arguments it never "
            "showed; nothing is recorded (approve with the digest, or in the console, API or CLI).",
            "tests/test_red_team_stale_decisions.py",
        ),
        _Row("expired", "approval", False, "The proposal's approval window has passed."),
        _Row("reason_required", "review", False, "A rejection needs a reason for the requester."),
        _Row(
            "editor_approval", "approval", False,
            "A reviewer who edited the proposal cannot also approve it.",
            "tests/test_approvals.py",
        ),
        _Row(
            "approval_class_invalid", "approval", False,
            "The proposal's recorded approval class is below the tool's own.",
            "tests/test_escalation.py",
        ),
        _Row(
            "forged_proposal", "review", False,
            "The proposal's MAC does not verify; propose it again.",
            "tests/test_proposal_mac.py",
        ),
        _Row(
            "reviewer_inactive", "review", False,
            "The reviewer is not an active identity.",
            "tests/test_identities.py",
        ),
        _Row(
            "wrong_release", "review", False,
            "The proposal belongs to another release than the one deciding it.",
            "tests/test_release_control_http.py",
        ),
        _Row(
            "superseded", "review", False,
            "The proposal was edited; review its replacement.",
            "tests/test_red_team_decisions.py",
        ),
        _Row(
            "original_not_rejected", "review", False,
            "The edit's original proposal is not rejected, so the edit cannot be approved.",
            "tests/test_red_team_decisions.py",
        ),
        _Row(
            "tool_switch", "review", False,
            "An edit cannot switch to another tool.",
            "tests/test_approvals.py",
        ),
        _Row(
            "requester_inactive", "review", False,
            "The requester of the edited proposal is no longer an active identity.",
            "tests/test_approvals.py",
        ),
        _Row(
            "no_change", "review", False,
            "The edited arguments equal the original; approve the original instead.",
            "tests/test_approvals.py",
        ),
        _Row(
            "malformed_decision", "hitl", False,
            "A resume's decisions are not a non-empty list of approve, reject or edit.",
            "tests/test_hitl.py",
        ),
        _Row(
            "missing_reviewer", "hitl", False,
            "Decisions came without an authenticated reviewer.",
            "tests/test_hitl.py",
        ),
        _Row(
            "decision_count", "hitl", False,
            "The number of decisions differs from the number of action requests.",
            "tests/test_hitl.py",
        ),
        _Row(
            "malformed_arguments", "cli", False,
            "An edit's --args is not one JSON object.",
            "tests/test_cli_doors.py",
        ),
        _Row(
            "not_completed", "review", False,
            "Only a completed operation can be rolled back.",
            "tests/test_complex_patterns.py",
        ),
        _Row(
            "no_rollback", "review", False,
            "The tool declares no rollback, or its rollback tool is not in the release.",
            "tests/test_complex_patterns.py",
        ),
        _Row(
            "invalid_outcome", "review", False,
            "A dead letter can only be settled as succeeded or failed.",
            "tests/test_dead_letter_resolution.py",
        ),
        _Row(
            "not_dead_lettered", "review", False,
            "The operation is not dead-lettered.",
            "tests/test_dead_letter_resolution.py",
        ),
        _Row(
            "not_open", "review", False,
            "The operation has no open dead letter.",
            "tests/test_dead_letter_resolution.py",
        ),
        _Row(
            "operation_mismatch", "review", False,
            "The dead-lettered operation is not its proposal's own.",
            "tests/test_dead_letter_resolution.py",
        ),
        _Row(
            "self_resolution", "review", False,
            "The requester, or a reviewer who edited the write, cannot settle its outcome.",
            "tests/test_dead_letter_resolution.py",
        ),
        _Row("not_found", "review", False, "No such operation.", "tests/test_dead_letter_resolution.py"),
    ),
    *_family(
        "request",
        _Row("missing_token", "auth", False, "No bearer token was sent.", "tests/test_server_auth.py"),
        _Row(
            "authentication_failed", "identity", False,
            "The token is unknown or rotated.",
            "tests/test_identities.py",
        ),
        _Row("revoked", "identity", False, "The identity has been revoked.", "tests/test_identities.py"),
        _Row(
            "forged_identity", "identity", False,
            "The identity row's MAC does not verify.",
            "tests/test_identities.py",
        ),
        _Row(
            "unknown_identity", "identity", False,
            "No identity with that user id.",
            "tests/test_store_contract.py",
        ),
        _Row(
            "not_admin", "identity", False,
            "Managing identities needs the admin role.",
            "tests/test_identities.py",
        ),
        _Row(
            "cross_tenant", "identity", False,
            "An administrator may manage only their own tenant's identities.",
            "tests/test_identities.py",
        ),
        _Row(
            "missing_admin", "cli", False,
            "The store already has identities: act --as an administrator.",
            "tests/test_cli_doors.py",
        ),
        _Row("exists", "cli", False, "An identity with that user id already exists.", "tests/test_cli.py"),
        _Row(
            "not_empty", "cli", False,
            "seed-demo works only on a store without identities.",
            "tests/test_cli_doors.py",
        ),
        _Row(
            "not_auditor", "cli", False,
            "Reading audit events needs the auditor role (the CLI's audit commands and the HTTP trace route).",
            "tests/test_audit_access.py",
        ),
        _Row(
            "sign_in_throttled", "identity", True,
            "Too many failed sign-ins from this address or for this person in the window: "
            "refused before any token is checked until the window ends (Retry-After).",
            "tests/test_sign_in_throttle.py",
        ),
        _Row(
            "not_all_tenants", "cli", False,
            "Retention across every tenant needs an all-tenant auditor.",
            "tests/test_admin_changes.py",
        ),
        _Row(
            "not_allowed", "auth", False,
            "The server refuses this action on the resource for the caller.",
            "tests/test_server_auth.py",
        ),
        _Row(
            "thread_copy_refused", "auth", False,
            "A reviewer tried to copy a thread: the copy would keep the source's owner.",
            "tests/test_server_routes.py",
        ),
        _Row(
            "principal_in_context", "auth", False,
            "A client tried to set the principal in the run context.",
            "tests/test_server_auth.py",
        ),
        _Row(
            "state_update_refused", "auth", False,
            "Clients may not rewrite a thread's state.",
            "tests/test_server_auth.py",
        ),
        _Row(
            "host_not_allowed", "auth", False,
            "An HTTP request to `toolgate mcp serve` names a host the server does not answer to (DNS "
            "rebinding): refused 421 before anything reads it, counted like a failed sign-in.",
            "tests/test_mcp_serve.py",
        ),
        _Row(
            "request_id_reused", "server", False,
            "An MCP call to `toolgate mcp serve` whose `toolgate/request_id` names the task of another "
            "call (another tool or other arguments): refused, audited, nothing proposed or run.",
            "tests/test_mcp_serve.py",
        ),
        _Row(
            "session_not_found", "auth", False,
            "An HTTP request to `toolgate mcp serve` names a session another person opened (or none "
            "this server knows): refused 404, audited, the session untouched.",
            "tests/test_mcp_serve.py",
        ),
        _Row(
            "thread_owner", "auth", False,
            "The thread belongs to another principal.",
            "tests/test_hitl.py",
        ),
        _Row(
            "thread_owner_refused", "auth", False,
            "A thread update naming its owner or tenant metadata, which every access check filters "
            "on and no update changes.",
            "tests/test_red_team_server_threads.py",
        ),
        _Row(
            "not_found_or_hidden", "auth", False,
            "The LangGraph runtime answered 404: the thread or run does not exist, or the caller's "
            "filter does not reach it (someone else's); the answer does not say which, the audit "
            "event records the request.",
            "tests/test_red_team_server_threads.py",
        ),
        _Row(
            "conflict", "auth", False,
            "The LangGraph runtime answered 409, e.g. a create naming a thread id someone else owns.",
            "tests/test_red_team_server_threads.py",
        ),
        _Row(
            "invalid_request", "auth", False,
            "The LangGraph runtime answered 422: a request body or query it cannot read.",
            "tests/test_red_team_server_threads.py",
        ),
        _Row(
            "request_refused", "auth", False,
            "Any other client error the LangGraph runtime answered a signed-in caller (405, 400...).",
            "tests/test_runtime_refusals.py",
        ),
        _Row(
            "missing_principal", "auth", False,
            "The run has no authenticated principal.",
            "tests/test_server_context.py",
        ),
        _Row(
            "state_version_unsupported", "state", False,
            "The task was saved by a newer toolgate; run it where that version is deployed.",
            "tests/test_state_version.py",
        ),
        _Row(
            "invalid_json", "server", False,
            "The request body is not valid JSON.",
            "tests/test_http_api.py",
        ),
        _Row(
            "invalid_body", "server", False,
            "The request body has unknown, missing or mistyped fields.",
            "tests/test_http_api.py",
        ),
        _Row(
            "invalid_status", "server", False,
            "The status filter names no operation status.",
            "tests/test_http_api.py",
        ),
        _Row(
            "invalid_page", "server", False,
            "The listing's limit is not a whole number in range, or its after is not a position a page handed out.",
            "tests/test_http_api.py",
        ),
        _Row(
            "body_too_large", "server", False,
            "The request body exceeds the size limit.",
            "tests/test_http_api.py",
        ),
        _Row(
            "missing_role", "server", False,
            "Editing the proposal needs a reviewer role of its approval class.",
            "tests/test_http_api.py",
        ),
        _Row("not_found", "server", False, "No such proposal or operation.", "tests/test_http_api.py"),
        _Row(
            "no_identities", "cli", False,
            "The store has no people yet: the wrong data directory, or nobody imported.",
            "tests/test_cli_native.py",
        ),
        _Row(
            "store_missing", "cli", False,
            "No store (or no store secret) where the settings point; nothing was created.",
            "tests/test_cli_native.py",
        ),
        _Row(
            "invalid_filter", "cli", False,
            "A list command's filter names no valid value; the message lists them.",
            "tests/test_cli_native.py",
        ),
        _Row(
            "configuration_error", "cli", False,
            "A setting, file or URL is missing or invalid.",
            "tests/test_cli_native.py",
        ),
        _Row("usage_error", "cli", False, "toolgate was used wrongly (no more specific code).", "tests/test_cli_native.py"),
        _Row(
            "runtime_error", "cli", None,
            "Something failed while running (no more specific code).",
            "tests/test_cli_native.py",
        ),
        _Row("toolgate_error", "cli", None, "A toolgate error without a more specific code.", "tests/test_cli_native.py"),
        _Row(
            "store_error", "cli", None,
            "The store failed (a database driver's error, translated).",
            "tests/test_cli_native.py",
        ),
        _Row(
            "invalid_transition", "cli", False,
            "The database refused an operation state change (its status moved on).",
            "tests/test_cli_native.py",
        ),
        _Row(
            "direct_invocation", "cli", False,
            "A tool's StructuredTool was called directly instead of through the gateway.",
            "tests/test_cli_native.py",
        ),
        _Row(
            "unavailable", "server", True,
            "toolgate is not configured on this server.",
            "tests/test_http_api.py",
        ),
        _Row(
            "internal_error", "server", None,
            "An unexpected failure; the server log has the traceback.",
            "tests/test_http_api.py",
        ),
    ),
    *_family(
        "release",
        _Row(
            "release_stopped", "release", False,
            "The release serving the task was stopped; its waiting calls are answered task_stopped.",
            "tests/test_stop_nodes.py",
        ),
        _Row(
            "missing_role", "release", False,
            "Release control needs a release role.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "registry_invalid", "cli", False,
            "The release's tool bundle is incomplete or unsafe; it is not loaded.",
            "tests/test_cli_native.py",
        ),
        _Row(
            "release_state_tampered", "release", False,
            "Release-control records do not verify; nothing acts on them.",
            "tests/test_release_control_tamper.py",
        ),
        _Row(
            "bundle_unverified", "release", False,
            "The release bundle does not verify against its manifest.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "rollout_active", "release", False,
            "Another rollout is already in shadow or canary.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "same_release", "release", False,
            "The candidate is the active release, or the same bundle.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "invalid_percent", "release", False,
            "The canary percentage is out of range.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "shadow_required", "release", False,
            "A canary needs the candidate in shadow first.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "wrong_candidate", "release", False,
            "The rollout under way is for another candidate.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "canary_required", "release", False,
            "Only a release in canary can be promoted.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "automatic_stop", "release", False,
            "The candidate tripped the automatic stop.",
            "tests/test_release_control_stop.py",
        ),
        _Row(
            "schema_quality", "release", False,
            "A candidate tool fails the schema-quality check (an undescribed parameter, no "
            "description, or a write without a when-not-to-use line); see `toolgate registry lint`.",
            "tests/test_schema_quality.py",
        ),
        _Row(
            "breaking_schema_change", "release", False,
            "A candidate changes a tool's argument schema in a breaking way (field removed or "
            "renamed, new required field, narrowed type, enum value removed) without a major "
            "version bump.",
            "tests/test_schema_quality.py",
        ),
        _Row(
            "gate_not_passed", "release", False,
            "No complete gate run of the candidate against the active release on the required dataset "
            "(a rollout, or a thread migrated to it, needs one).",
            "tests/test_hostile_rollout.py",
        ),
        _Row(
            "gate_failed", "release", False,
            "The candidate's latest counted gate run failed.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "review_missing", "release", False,
            "Critical cases of the candidate's gate run have no reviewer's sign-off and no waiver.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "evidence_tampered", "release", False,
            "Evidence rows do not verify, or a recorded gate run or rollback dry run is missing from them.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "rollback_dry_run_missing", "release", False,
            "No rollback dry run of the active release, which the candidate would replace.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "rollback_dry_run_failed", "release", False,
            "The latest rollback dry run of the active release failed.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "canary_traffic_too_low", "release", True,
            "The canary has judged fewer calls than promotion needs; it may later.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "canary_too_short", "release", True,
            "The canary has run fewer minutes than promotion needs; it may later.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "clock_skew", "release", True,
            "The store's clock reads before the canary began: its minutes are not counted.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "critical_failed", "release", False,
            "The rollback target's critical fixtures failed.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "critical_unavailable", "release", False,
            "The rollback target's critical fixtures cannot run (what they need does not load).",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "release_unavailable", "release", False,
            "A thread's release (its pin, or its canary arm) cannot be loaded by this process: the "
            "task stops for review and none of its proposals is delivered here.",
            "tests/test_hostile_rollout.py",
        ),
        _Row(
            "hashes_changed", "release", False,
            "The candidate's bundle changed since its shadow began.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "nothing_to_roll_back", "release", False,
            "No previous release to restore.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "phase_changed", "release", True,
            "The rollout is no longer live.",
            "tests/test_release_control_stop.py",
        ),
        _Row(
            "state_changed", "release", True,
            "Release control or the thread's pin changed since it was read; look again and retry.",
            "tests/test_release_control_rollback.py",
        ),
        _Row(
            "unknown_thread", "release", False,
            "The thread has no release pin.",
            "tests/test_thread_pinning.py",
        ),
        _Row(
            "thread_pin_tampered", "release", False,
            "The thread's release pin does not verify.",
            "tests/test_thread_pinning.py",
        ),
        _Row(
            "other_tenant", "release", False,
            "The thread belongs to another tenant.",
            "tests/test_thread_pinning.py",
        ),
        _Row("thread_finished", "release", False, "The thread has ended.", "tests/test_thread_pinning.py"),
        _Row(
            "unknown_release", "release", False,
            "No release is installed under that id.",
            "tests/test_thread_pinning.py",
        ),
        _Row(
            "gate_unavailable", "release", False,
            "The release gate is not installed.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "gate_dataset_unreadable", "release", False,
            "The gate's dataset cannot be read.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "waiver_reason_required", "release", False,
            "A review waiver needs a reason of a minimum length.",
            "tests/test_release_evidence.py",
        ),
        _Row(
            "own_waiver", "release", False,
            "The admin whose waiver stands in for a candidate's missing sign-offs may not shadow, "
            "canary or promote it; another admin may.",
            "tests/test_hostile_rollout.py",
        ),
        _Row(
            "report_unknown", "review", False,
            "`evals review` signs only a report whose digest a gate run recorded in the store; this "
            "one no gate run recorded (written by hand, or by a run without a control or a store).",
            "tests/test_hostile_signoff.py",
        ),
    ),
)
# fmt: on
"""Every code, family by family; a code may sit in several families with a meaning of its own in each."""


def codes_of(family: Family) -> tuple[str, ...]:
    """The codes of ``family``, in catalog order."""
    return tuple(entry.code for entry in CATALOG if entry.family == family)


def lookup(family: Family, code: str) -> CodeEntry | None:
    """The entry of ``code`` in ``family``, or None."""
    return next((e for e in CATALOG if e.family == family and e.code == code), None)


__all__ = ["CATALOG", "FAMILIES", "CodeEntry", "Family", "RejectionCode", "codes_of", "lookup"]
