"""``toolgate verify``: the finish-line checklist as one operator command.

Each check prints one ``key=value`` line and the command exits non-zero when any check fails.
Checks that exercise writes do so through the demo release on the configured database, with a
verification thread of their own, exactly as production traffic would.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from toolgate.evals.adversarial.cases import CASES
from toolgate.evals.adversarial.runner import run_adversarial
from toolgate.graph.bootstrap import App
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.proposals import draft_proposal, store_proposal
from toolgate.policy.principal import Principal
from toolgate.store.chain import verify_chain
from toolgate.tools.audit import audit_specs
from toolgate.tools.demo import DemoSystem
from toolgate.tools.demo.identities import demo_principals
from toolgate.tools.schema.quality import release_quality

VERIFY_PRINCIPALS = demo_principals()


ACTS_AS = ("sam", "omar")
"""The demo people the idempotency check proposes (sam) and approves (omar) as."""


def authorize_verifier(app: App, as_user: str | None) -> Principal:
    """The person who runs the idempotency check, which proposes, approves and delivers a restart
    as the demo's sam and omar on the configured store: an authenticated administrator of their
    tenant (``--as`` with that person's ``TOOLGATE_TOKEN``, or the token alone), on a demo release
    only (on any other it would run that release's own ``restart_service`` handler, a real
    effect). Every refusal is audited ``identity.refused`` and raised: `IdentityError`
    (``missing_token``, a failed sign-in, ``not_admin``) or `ConfigurationError`."""
    from toolgate.cli.common import signed_in
    from toolgate.errors import ConfigurationError, IdentityError
    from toolgate.policy.identities import ADMIN_ROLE
    from toolgate.tools.demo.release import DEMO_RELEASES

    auditor, detail = app.gateway.auditor, {"command": "verify idempotency"}
    principal = signed_in(app, as_user, detail["command"], "the idempotency check approves and runs a write")
    tenant = VERIFY_PRINCIPALS[ACTS_AS[0]].tenant_id
    if ADMIN_ROLE not in principal.roles or principal.tenant_id != tenant:
        auditor.record(
            "identity.refused", "refused", user_id=principal.user_id, code="not_admin", detail=detail
        )
        raise IdentityError(
            f"{principal.user_id!r} may not run the idempotency check (an administrator of {tenant!r} may)",
            code="not_admin",
        )
    if app.release.id not in DEMO_RELEASES:
        auditor.record(
            "identity.refused", "refused", user_id=principal.user_id, code="not_a_demo_release", detail=detail
        )
        raise ConfigurationError(
            f"the idempotency check delivers the demo's restart_service; release {app.release.id!r} "
            "is not a demo release, whose handler would act for real"
        )
    return principal


def verify_identity(app: App, user_id: str, by: Principal) -> Principal:
    """A demo person the checks act as: an active identity in the store (added by ``by``, the
    authenticated administrator running the check, with a random token nobody sees when missing,
    so the check can never become a way in)."""
    principal = VERIFY_PRINCIPALS[user_id]
    if app.store.identities.get(user_id) is None:
        app.gateway.directory.add(principal, by=by)
    active = app.gateway.directory.active(user_id, principal.tenant_id)
    if active is None:
        raise RuntimeError(f"verification identity {user_id!r} is not active in this store")
    return active


@dataclass(frozen=True)
class CheckResult:
    """One line of the checklist."""

    name: str
    status: str  # PASS, FAIL, not_available or not_applicable
    detail: str = ""

    def line(self) -> str:
        """``name=STATUS detail``."""
        return f"{self.name}={self.status}" + (f" {self.detail}" if self.detail else "")


def check_registry(app: App) -> CheckResult:
    report = audit_specs(app.registry.release, lambda: list(app.registry.tools.values()))
    return CheckResult(
        "registry_audit",
        "PASS" if report.passed else "FAIL",
        f"tool_count={report.tool_count} defects={len(report.defects)}",
    )


def check_schema_quality(app: App) -> CheckResult:
    """The schema-quality check of the configured release (`toolgate registry lint`)."""
    results = release_quality(app.registry.tools.values())
    failing = [r.name for r in results if not r.passed]
    return CheckResult(
        "schema_quality",
        "FAIL" if failing else "PASS",
        f"tools={len(results)} failing={len(failing)}"
        + (f" failing_tools={','.join(failing)}" if failing else ""),
    )


def check_adversarial(app: App) -> CheckResult:
    report = run_adversarial(CASES)
    return CheckResult(
        "adversarial_dispatch",
        "PASS" if report.passed else "FAIL",
        f"cases={len(report.results)} handlers_executed_for_rejected="
        f"{report.handlers_executed_for_rejected} proposals_for_rejected={report.proposals_for_rejected}",
    )


@dataclass(frozen=True)
class IdempotencyResult:
    """What N concurrent deliveries of one approved operation did."""

    deliveries: int
    executions: int
    stored_result_returned: int
    operation_key: str


def run_idempotency(app: App, concurrency: int, by: Principal) -> IdempotencyResult:
    """Propose, approve and deliver one restart ``concurrency`` times at once; count the effects.
    ``by``: the administrator running it (`authorize_verifier`), on the record as who did."""
    gw = app.gateway
    requester, reviewer = verify_identity(app, ACTS_AS[0], by), verify_identity(app, ACTS_AS[1], by)
    gw.auditor.record(
        "verify.idempotency",
        "started",
        user_id=by.user_id,
        tenant_id=by.tenant_id,
        detail={"acts_as": list(ACTS_AS), "concurrency": concurrency},
    )
    spec = app.registry.get("restart_service")
    assert spec is not None
    draft = draft_proposal(
        gw,
        spec,
        tenant_id=requester.tenant_id,
        requester_id=requester.user_id,
        thread_id=f"verify-{uuid.uuid4().hex[:12]}",
        call_id="verify-call",
        arguments={"service_alias": "web", "reason": "toolgate verify idempotency"},
    )
    proposal, _, _ = store_proposal(gw, spec, draft, actor=requester.user_id)
    decide(gw, proposal.proposal_id, reviewer, "approve")
    barrier = threading.Barrier(concurrency)

    def deliver(i: int) -> bool:
        barrier.wait()
        return gw.executor.deliver(proposal.operation_key, worker_id=f"verify-{i}", wait_s=60).duplicate

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        duplicates = sum(pool.map(deliver, range(concurrency)))
    from toolgate.canonical import idempotency_key_for

    key = idempotency_key_for(proposal.operation_key)
    executions = DemoSystem(app.store).count("sor_restart_requests", idempotency_key=key)
    return IdempotencyResult(
        deliveries=concurrency,
        executions=executions,
        stored_result_returned=duplicates,
        operation_key=proposal.operation_key,
    )


def check_idempotency(app: App, by: Principal, concurrency: int = 20) -> CheckResult:
    result = run_idempotency(app, concurrency, by)
    ok = result.executions == 1 and result.stored_result_returned == concurrency - 1
    return CheckResult(
        "idempotency",
        "PASS" if ok else "FAIL",
        f"deliveries={result.deliveries} executions={result.executions} "
        f"stored_result_returned={result.stored_result_returned}",
    )


def check_audit_chain(app: App) -> CheckResult:
    report = verify_chain(app.store)
    if report.ok:
        return CheckResult("audit_chain", "PASS", f"events={report.events}")
    return CheckResult(
        "audit_chain",
        "FAIL",
        f"first_bad_seq={report.first_bad_seq} "
        f'first_bad_event={report.first_bad_event_id} reason="{report.reason}"',
    )


def check_legacy_timeouts(app: App) -> CheckResult:
    try:
        from toolgate.evals.labs import run_lab4
    except ImportError:
        return CheckResult("legacy_timeouts", "not_available")
    result = run_lab4(submissions=20, drop_rate=0.3)
    ok = result.duplicates == 0 and result.false_failures == 0
    return CheckResult(
        "legacy_timeouts",
        "PASS" if ok else "FAIL",
        f"submissions={result.submissions} dropped={result.dropped} duplicates={result.duplicates} "
        f"false_failures={result.false_failures} unresolved={result.unresolved}",
    )


def check_evals(app: App) -> CheckResult:
    """The evaluation gate (``toolgate evals run``) on the configured release: the packaged dataset
    and the cases derived from the release's declarations, scripted. PASS on what the runs showed;
    critical cases still without a sign-off are reported (``unreviewed_critical=``), not failed:
    sign-off is a person's act that verify cannot do, and release control demands it anyway."""
    from toolgate.evals.fixtures import DEFAULT_DATASET, load_dataset
    from toolgate.evals.gate import evaluate_gate
    from toolgate.evals.signoff import reviewed_cases

    result = evaluate_gate(load_dataset(DEFAULT_DATASET), app.release)
    result.reviewed = reviewed_cases(
        app.store, result.dataset.sha256, result.candidate.facts.manifest_sha256, result.critical_tenants()
    )
    failures = result.tested_failures()
    records = result.candidate.records
    passed = sum(r.score.passed for r in records)
    detail = (
        f"release={result.candidate.facts.release} cases={len(records)} passed={passed} "
        f"derived={len(result.derived)} critical={len(result.critical_ids)} "
        f"unreviewed_critical={len(result.unreviewed())}"
    )
    if failures:
        detail += f" failure={failures[0].split()[0]}"
    return CheckResult("evals_gate", "FAIL" if failures else "PASS", detail)


def check_rollback(app: App) -> CheckResult:
    """Dry-run ``toolgate release rollback --dry-run``: the target (the rollout's control or, with
    no rollout, the active release itself, which is what a rollback of the next candidate restores)
    resolves, its hashes verify against its reviewed manifest and the ones recorded while it was
    active, and its critical fixtures pass. Writes nothing, so a fresh store gets a real verdict."""
    from toolgate.errors import ReleaseControlError
    from toolgate.releases.control import ReleaseControl
    from toolgate.releases.rollback import plan_dry_run

    control = ReleaseControl(app)
    try:
        state = control.state()
        plan = plan_dry_run(state, control.active(state), control.manifest_sha256, control.critical_runner)
    except ReleaseControlError as exc:
        return CheckResult("rollback_dry_run", "FAIL", f"refused={exc.code}")
    detail = f"target={plan.target} hashes={plan.hashes} critical={plan.critical}"
    if plan.problems:
        detail += f" refused={plan.problems[0][0]}"
    return CheckResult("rollback_dry_run", plan.status, detail)


CHECKS: dict[str, Callable[..., CheckResult]] = {
    "registry_audit": check_registry,
    "schema_quality": check_schema_quality,
    "adversarial_dispatch": check_adversarial,
    "idempotency": check_idempotency,
    "legacy_timeouts": check_legacy_timeouts,
    "evals_gate": check_evals,
    "rollback_dry_run": check_rollback,
    "audit_chain": check_audit_chain,
}


WRITES = frozenset({"idempotency"})
"""The checks that propose, approve and run a write: run for the administrator `authorize_verifier`
let in, and for nobody else."""


def run_checks(app: App, names: list[str] | None = None, by: Principal | None = None) -> list[CheckResult]:
    """Run the named checks (all by default), in checklist order; ``by``: the authorized
    administrator, needed when a check of `WRITES` is among them."""
    results = []
    for name in names or list(CHECKS):
        if name in WRITES:
            if by is None:
                raise ValueError(f"the {name} check runs only for an authorized administrator")
            results.append(CHECKS[name](app, by))
        else:
            results.append(CHECKS[name](app))
    return results


__all__ = [
    "ACTS_AS",
    "CHECKS",
    "WRITES",
    "CheckResult",
    "IdempotencyResult",
    "authorize_verifier",
    "run_checks",
    "run_idempotency",
]
