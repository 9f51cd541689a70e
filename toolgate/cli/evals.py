"""``toolgate evals``: the release gate, human sign-off of its critical cases, LangSmith datasets.

``evals run`` works offline: every case runs against the candidate (and the control) on its own
throwaway store with the scripted model. It prints the gate's summary line first and exits 1
when the gate fails; missing sign-offs fail it unless ``--no-require-review``. The configured
store is read for sign-offs and, when the run covered a whole dataset against a control, gets the
verdict as release evidence (`toolgate.releases.evidence`; ``evidence=recorded``): what ``release
shadow``, ``canary`` and ``promote`` later demand. ``evals review`` signs a report as an
authenticated person (``--as`` plus ``TOOLGATE_TOKEN``, like ``approve``), and only a report whose
digest such a recorded run names (else ``report_unknown``, `toolgate.evals.signoff`). ``evals capture`` and
``evals captured`` turn production incidents into cases that count once reviewed
(`toolgate.cli.captured`).

``evals run --model PROVIDER:NAME`` runs both releases with a real chat model instead
(`toolgate.evals.live_model`); a model that cannot be built is refused before anything runs
(``error=<code>``, exit 2). Its verdict is recorded with the model named in its detail, and release
control counts only scripted runs (a live model's answers are not reproducible from the bundle and
the dataset); the line says ``release_control=not_counted``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from toolgate.cli.captured import capture_command, captured_app
from toolgate.cli.common import kv, open_from_env, person
from toolgate.config import Settings
from toolgate.errors import ConfigurationError, IdentityError, StoreError
from toolgate.evals.fixtures import DEFAULT_DATASET, load_dataset
from toolgate.evals.gate import GateResult, evaluate_gate
from toolgate.evals.gate_record import record_gate_run
from toolgate.evals.live_model import SCRIPTED, choose_model
from toolgate.evals.report import build_report, coverage_lines, lines, write_reports
from toolgate.evals.signoff import refuse, reviewed_cases, sign_off
from toolgate.store.factory import open_store

evals_app = typer.Typer(
    no_args_is_help=True,
    help="Evaluate releases: the release gate, sign-offs, captured incidents, LangSmith datasets.",
)
evals_app.command("capture")(capture_command)
evals_app.add_typer(captured_app, name="captured")

LANGSMITH_KEY_VARIABLES = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")


def _reviewed(settings: Settings, result: GateResult) -> list[str]:
    """Critical cases signed off in the configured store for this dataset and candidate bundle."""
    tenants = result.critical_tenants()
    try:
        store = open_store(
            settings.database_url, settings.data_dir, key=settings.audit_key(create=False), read_only=True
        )
    except (ConfigurationError, StoreError):
        return []  # no store configured yet: nobody has signed anything
    try:
        return reviewed_cases(store, result.dataset.sha256, result.candidate.facts.manifest_sha256, tenants)
    finally:
        store.close()


@evals_app.command("run")
def run(
    dataset: Annotated[Path, typer.Option(help="Dataset (JSONL).")] = DEFAULT_DATASET,
    candidate: Annotated[
        str | None, typer.Option(help="Candidate release (default: TOOLGATE_RELEASE).")
    ] = None,
    control: Annotated[str | None, typer.Option(help="Known-good control release.")] = None,
    report_dir: Annotated[Path, typer.Option(help="Where the JSON and HTML reports go.")] = Path("reports"),
    critical_only: Annotated[bool, typer.Option(help="Run only the critical cases.")] = False,
    require_review: Annotated[
        bool,
        typer.Option(
            "--require-review/--no-require-review",
            help="Fail the gate unless every critical case has a sign-off (the default).",
        ),
    ] = True,
    derived: Annotated[
        bool,
        typer.Option(
            "--derived/--no-derived",
            help="Also run the cases derived from both releases' declarations (the default; a run "
            "without them scores the dataset alone and is never release evidence).",
        ),
    ] = True,
    model: Annotated[
        str,
        typer.Option(
            help="'scripted' (each case's scripted turns) or PROVIDER:NAME, a real model for both releases."
        ),
    ] = SCRIPTED,
) -> None:
    """Run the dataset and the derived cases on the candidate and the control; print the gate
    line and the coverage table; write the reports."""
    settings = Settings.from_env()
    chosen = choose_model(model, settings)  # refused here, before anything runs
    data = load_dataset(dataset)
    result = evaluate_gate(
        data,
        candidate or settings.release,
        control,
        critical_only=critical_only,
        derived=derived,
        model=chosen,
    )
    result.require_review = require_review
    result.reviewed = _reviewed(settings, result)
    report = build_report(result)
    json_path, html_path = write_reports(report, report_dir)
    for line in [*lines(result), *coverage_lines(result)]:
        typer.echo(line)
    kv(report=json_path, html=html_path, digest=report["digest"])
    kv(**_record(settings, result, critical_only=critical_only, report_digest=str(report["digest"])))
    raise typer.Exit(0 if result.passed else 1)


def _record(
    settings: Settings, result: GateResult, *, critical_only: bool, report_digest: str
) -> dict[str, str]:
    """Keep the verdict (all but review) in the configured store: the facts of the ``evidence=``
    line, ``recorded`` with its verdict and id, or ``not_recorded`` and why."""
    if result.control is None:
        return {"evidence": "not_recorded", "reason": "no_control"}
    if critical_only:
        return {"evidence": "not_recorded", "reason": "critical_only"}
    try:
        settings.require_store()  # the verdict is kept in an existing store, never in a new one
        store = open_store(settings.database_url, settings.data_dir, key=settings.audit_key(create=False))
    except (ConfigurationError, StoreError):
        return {"evidence": "not_recorded", "reason": "no_store"}
    try:
        store.setup()  # a store used for the first time: its schema, as any first command makes it
        evidence = record_gate_run(store, result, report_digest)
    except StoreError:
        return {"evidence": "not_recorded", "reason": "store_error"}
    finally:
        store.close()
    recorded = {"evidence": "recorded", "verdict": evidence.verdict, "id": evidence.evidence_id}
    if result.candidate.model != SCRIPTED:
        return {**recorded, "model": result.candidate.model, "release_control": "not_counted"}
    if not result.derived:
        return {**recorded, "derived_cases": "0", "release_control": "not_counted"}
    return recorded


@evals_app.command("mutate")
def mutate_command(
    release: Annotated[
        str | None, typer.Option(help="Release to loosen (default: TOOLGATE_RELEASE).")
    ] = None,
    dataset: Annotated[Path, typer.Option(help="Dataset (JSONL) the gate runs.")] = DEFAULT_DATASET,
    kind: Annotated[
        list[str] | None, typer.Option(help="Only mutants of this kind (repeatable), e.g. scope_dropped.")
    ] = None,
) -> None:
    """Run the gate on every single-point loosening of RELEASE; print the mutation score, the
    kinds and every mutant that passed the gate. Exits 1 unless every mutant fails the gate."""
    from toolgate.evals.mutation import mutate

    settings = Settings.from_env()
    target = release or settings.release
    kinds = set(kind or ())
    report = mutate(target, load_dataset(dataset), only=(lambda m: m.kind in kinds) if kinds else None)
    if report.base_failures:
        kv(mutation="not_scored", release=report.release, reason="release_fails_its_own_gate")
        for failure in report.base_failures:
            typer.echo(f"gate_failure {failure}")
        raise typer.Exit(1)
    refused = [r for r in report.results if r.status == "refused_at_load"]
    equivalent = [r for r in report.results if r.status == "equivalent"]
    kv(
        mutation=f"{report.score:.1f}%",
        release=report.release,
        mutants=len(report.killed) + len(report.survived),
        killed=len(report.killed),
        survived=len(report.survived),
        refused_at_load=len(refused),
        equivalent=len(equivalent),
        cases_run=sum(r.cases for r in report.results),
    )
    for name, (killed, total) in report.kinds().items():
        kv(kind=name, killed=f"{killed}/{total}")
    for result in report.survived:
        kv(survived=result.mutant.id, description=json.dumps(result.mutant.description))
    for result in refused:
        kv(refused_at_load=result.mutant.id, reason=json.dumps(result.reasons[0] if result.reasons else ""))
    for result in equivalent:
        kv(equivalent=result.mutant.id, reason=json.dumps(result.reasons[0]))
    raise typer.Exit(0 if not report.survived and report.killed else 1)


@evals_app.command("review")
def review(
    report: Annotated[Path, typer.Argument(help="The JSON report written by `toolgate evals run`.")],
    as_user: Annotated[str, typer.Option("--as", help="Reviewer (token in TOOLGATE_TOKEN).")],
) -> None:
    """Sign off every critical case of REPORT that acts in a tenant you review for."""
    application = open_from_env()
    auditor = application.gateway.auditor
    try:
        reviewer = person(application, as_user)
    except IdentityError as exc:
        refuse(auditor, exc.code, str(exc), user_id=as_user, digest=None)
        raise
    result = sign_off(application.store, auditor, application.gateway.directory, report, reviewer)
    kv(
        report=report,
        digest=result.report_digest,
        reviewer=as_user,
        signed=len(result.signed),
        already_signed=len(result.already),
        other_tenant=len(result.other_tenant),
        signed_at=result.signed_at,
    )


@evals_app.command("push")
def push(
    name: Annotated[str, typer.Option(help="LangSmith dataset name.")],
    dataset: Annotated[Path, typer.Option(help="Dataset (JSONL).")] = DEFAULT_DATASET,
) -> None:
    """Create or update the LangSmith dataset NAME from the dataset file (needs LANGSMITH_API_KEY)."""
    if not any(os.environ.get(v) for v in LANGSMITH_KEY_VARIABLES):
        typer.echo(
            'error=langsmith_not_configured message="set LANGSMITH_API_KEY to push; nothing was sent"',
            err=True,
        )
        raise typer.Exit(2)
    from toolgate.evals.langsmith_target import push_dataset

    counts = push_dataset(load_dataset(dataset), name)
    kv(dataset=name, **counts)


__all__ = ["evals_app"]
