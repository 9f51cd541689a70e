"""The release gate: a candidate release against a control, on a reviewed dataset and on cases
derived from both releases' own declarations.

Both releases run every case (`toolgate.evals.runner`) and are scored on what their stores and
handlers did (`toolgate.evals.scoring`). Besides the dataset, the gate generates cases from every
write tool, scope, rule, escalation and rate limit either release declares
(`toolgate.evals.derived_cases`) and runs them on both. The gate FAILS when the candidate has any
approval bypass, cross-tenant access, duplicate effect or dangerous false positive (a generated
case the candidate lets further than the control: ``loosened=``, `toolgate.evals.coverage`), when
a write tool, rule or escalation of either release is demonstrated by no case (``uncovered=``),
when any critical case fails, when its bundle is not the one its reviewed manifest describes, or
when a quality metric falls below the control's, even if aggregate accuracy improves, or when a
per-task cost (tool calls, model turns, tokens) is more than its policy's limit worse than the
control's (`toolgate.policy.cost_limits`; 20% by default), or when a critical case of the
dataset has no human sign-off (``human_reviewed_critical=n/m``; generated cases are derived from
the reviewed manifest itself and need none). Review is required by default; ``toolgate evals run
--no-require-review`` evaluates a fresh candidate before anyone has reviewed it, and the same
report is what reviewers then sign. The verdict without review (`GateResult.tested_failures`) is
what the store keeps as release evidence (`toolgate.releases.evidence`), since sign-offs are
re-read when a release moves.
With a live model (`toolgate.evals.live_model`) both releases run with it: what differs between
them is the bundle; the model's own shortfalls show in the metrics and in the cases that fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from toolgate.evals.coverage import TargetCoverage, coverage, loosenings, uncovered
from toolgate.evals.derived_cases import DerivedCase, derive, merge, seeds_of
from toolgate.evals.fixtures import DEFAULT_DATASET, Dataset, EvalCase, load_dataset
from toolgate.evals.gate_targets import Declarations, Target, union_roles
from toolgate.evals.live_model import SCRIPTED, EvalModel
from toolgate.evals.observation import Observation
from toolgate.evals.release_facts import ReleaseFacts
from toolgate.evals.runner import CaseRunner
from toolgate.evals.scoring import CaseScore, score_case
from toolgate.policy.cost_limits import COST_METRICS, over_limit
from toolgate.policy.principal import Principal
from toolgate.releases.bundle import Release

QUALITY = ("tool_selection_top1", "no_tool_precision", "argument_valid")
"""Percent metrics a candidate may not lose against its control."""


@dataclass
class CaseRecord:
    """One case as run against one release."""

    case: EvalCase
    tenant: str
    """Tenant of the case's principal (binds the case's human sign-off)."""
    observation: Observation
    score: CaseScore


def _percent(values: Sequence[bool | None]) -> float | None:
    counted = [v for v in values if v is not None]
    return round(100.0 * sum(counted) / len(counted), 1) if counted else None


@dataclass
class DerivedRun:
    """One generated case as run against one release."""

    derived: DerivedCase
    observation: Observation
    broken: list[str] = field(default_factory=list)
    """Its claims this run broke (empty: the run demonstrated what the case probes)."""


@dataclass
class ReleaseRun:
    """Every case of a dataset (and the generated cases) run against one release."""

    facts: ReleaseFacts
    model: str = SCRIPTED
    """The model the cases ran with: ``scripted`` or ``provider:name``."""
    records: list[CaseRecord] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Cases not applicable to this release (it lacks a tool they require)."""
    seconds: float = 0.0
    derived: dict[str, DerivedRun] = field(default_factory=dict)
    """Generated cases by id (those applicable to the release)."""
    declarations: Declarations | None = field(default=None, repr=False)
    """What the release declares (the source of its generated cases and targets)."""

    def metrics(self) -> dict[str, float | int | None]:
        """The gate's metrics and the cost per task."""
        scores = [r.score for r in self.records]
        return {
            "cases": len(scores),
            "passed": sum(s.passed for s in scores),
            "tool_selection_top1": _percent([s.selection_hit for s in scores]),
            "no_tool_precision": _percent([s.abstained for s in scores]),
            "argument_valid": _percent([s.argument_valid for s in scores]),
            "approval_bypasses": sum(s.approval_bypass for s in scores),
            "cross_tenant_access": sum(s.cross_tenant_access for s in scores),
            "duplicate_effects": sum(s.duplicate_effects for s in scores),
            "dangerous_false_positives": sum(s.dangerous for s in scores),
            "critical": sum(s.critical for s in scores),
            "critical_failed": sum(s.critical and not s.passed for s in scores),
            **self.cost_per_task({r.case.id for r in self.records}),
            **self.token_totals(),
        }

    def token_totals(self) -> dict[str, int | None]:
        """Input, output and reasoning tokens of the whole run (``None``: some case's is unknown)."""
        totals: dict[str, int | None] = {}
        for kind in ("input", "output", "reasoning"):
            values = [r.observation.tokens.get(kind) for r in self.records]
            known = [v for v in values if isinstance(v, int)]
            totals[f"{kind}_tokens"] = sum(known) if values and len(known) == len(values) else None
        return totals

    def token_source(self) -> str:
        """``reported`` when every run's usage came from the provider, ``unknown`` when a live
        model's provider left some out, else ``estimated``."""
        sources = {r.observation.tokens.get("source") for r in self.records}
        if sources == {"reported"}:
            return "reported"
        return "unknown" if "unknown" in sources else "estimated"

    def cost_per_task(self, case_ids: set[str]) -> dict[str, float]:
        """Tool calls, model turns and tokens (input and output) per task over ``case_ids``."""
        records = [r for r in self.records if r.case.id in case_ids]
        tasks = max(len(records), 1)
        tokens = sum(
            (r.observation.tokens.get("input") or 0) + (r.observation.tokens.get("output") or 0)
            for r in records
        )
        return {
            "tool_calls_per_task": round(sum(r.observation.tool_calls for r in records) / tasks, 2),
            "model_turns_per_task": round(sum(r.observation.model_turns for r in records) / tasks, 2),
            "tokens_per_task": round(tokens / tasks, 1),
        }

    def cases_where(self, flag: Callable[[CaseScore], bool]) -> list[str]:
        """Ids of the cases whose score has ``flag``."""
        return [r.case.id for r in self.records if flag(r.score)]


def run_release(
    release: str | Release,
    cases: Sequence[EvalCase],
    *,
    skip_inapplicable: bool = False,
    progress: Callable[[str], None] | None = None,
    model: EvalModel | None = None,
) -> ReleaseRun:
    """Run ``cases`` against ``release`` (each on its own copy of one template store).

    ``skip_inapplicable`` (controls and rollback targets) skips cases that require a tool the
    release does not have; a candidate runs them all, so a tool it lost fails its cases.
    ``model``: a live model (a fresh one per case), else each case's scripted turns."""
    with CaseRunner(release, cases=cases) as runner:
        return run_on(runner, cases, skip_inapplicable=skip_inapplicable, progress=progress, model=model)


def run_on(
    runner: CaseRunner,
    cases: Sequence[EvalCase],
    derived: Sequence[DerivedCase] = (),
    *,
    skip_inapplicable: bool = False,
    progress: Callable[[str], None] | None = None,
    model: EvalModel | None = None,
) -> ReleaseRun:
    """Run ``cases`` and the generated ``derived`` cases on ``runner``'s release. Generated cases
    a release lacks a tool for are not run there (a candidate's new tool has no control run).
    ``model`` runs the dataset's cases; generated cases always run their scripted calls, since
    each claims what the release does with exactly those calls."""
    started = time.perf_counter()
    chosen = model or EvalModel()
    run = ReleaseRun(
        facts=runner.facts, model=chosen.name, declarations=Declarations.of(runner.release, runner.registry)
    )
    for case in cases:
        if skip_inapplicable and not runner.facts.applies_to(case.requires):
            run.skipped.append(case.id)
            continue
        observation = runner.run_case(case, model=chosen.build())
        tenant = runner.requester(case).tenant_id
        run.records.append(CaseRecord(case, tenant, observation, score_case(case, observation)))
        if progress is not None:
            progress(case.id)
    for one in derived:
        if not runner.facts.applies_to(one.case.requires):
            continue
        observation = runner.run_case(one.case)
        run.derived[one.id] = DerivedRun(one, observation, one.failures(observation))
        if progress is not None:
            progress(one.id)
    run.seconds = round(time.perf_counter() - started, 2)
    return run


@dataclass
class GateResult:
    """The verdict and everything it was decided on."""

    dataset: Dataset
    candidate: ReleaseRun
    control: ReleaseRun | None
    reviewed: list[str] = field(default_factory=list)
    """Critical case ids with a valid human sign-off for this dataset and candidate bundle."""
    require_review: bool = False
    """Fail on missing sign-offs (``toolgate evals run`` sets it unless ``--no-require-review``;
    library callers scoring a release's behaviour leave it off)."""
    derived: list[DerivedCase] = field(default_factory=list)
    """The generated cases both releases ran (`toolgate.evals.derived_cases`)."""
    derive_problems: list[str] = field(default_factory=list)
    """Declarations whose cases could not be built, and why (their targets stay uncovered)."""
    check_coverage: bool = True
    """Fail on uncovered targets (off only when the cases run are a chosen part of the gate's:
    `toolgate.evals.mutation` scores a mutant on the cases that can observe it)."""

    def loosened(self) -> dict[str, list[str]]:
        """Per generated case the control ran, how the candidate was more permissive (only those
        where it was): each one a dangerous false positive."""
        if self.control is None:
            return {}
        found: dict[str, list[str]] = {}
        for case_id, mine in self.candidate.derived.items():
            theirs = self.control.derived.get(case_id)
            if theirs is not None:
                how = loosenings(mine.derived, theirs.observation, mine.observation)
                if how:
                    found[case_id] = how
        return found

    def unsafe_derived(self) -> dict[str, list[str]]:
        """Generated cases in which the candidate executed without counted approval or twice,
        whatever the control did."""
        found: dict[str, list[str]] = {}
        for case_id, mine in self.candidate.derived.items():
            obs = mine.observation
            how = [f"operation {key} executed without counted approval" for key in obs.unapproved_executions]
            how += [f"{obs.duplicate_effects} duplicate effect(s)"] if obs.duplicate_effects else []
            if how:
                found[case_id] = how
        return found

    def coverage_table(self) -> list[TargetCoverage]:
        """Every target of both releases and the generated cases that demonstrated it."""
        runs = [run for run in (self.candidate, self.control) if run is not None]
        targets: dict[str, list[Target]] = {
            run.facts.release: run.declarations.targets() for run in runs if run.declarations is not None
        }
        demonstrated: dict[str, set[str]] = {}
        for run in runs:
            for case_id, one in run.derived.items():
                if not one.broken:
                    demonstrated.setdefault(case_id, set()).add(run.facts.release)
        return coverage(targets, self.derived, demonstrated)

    @property
    def critical_ids(self) -> list[str]:
        """The candidate's critical cases."""
        return [r.case.id for r in self.candidate.records if r.case.critical]

    def failures(self) -> list[str]:
        """Why the gate fails (empty: it passes), each naming its cases."""
        out = self.tested_failures()
        missing = self.unreviewed()
        if self.require_review and missing:
            out.append(f"unreviewed_critical={len(missing)} cases={','.join(missing)}")
        return out

    def unreviewed(self) -> list[str]:
        """The candidate's critical cases without a valid sign-off."""
        return sorted(set(self.critical_ids) - set(self.reviewed))

    def critical_tenants(self) -> dict[str, str]:
        """``{case id: tenant}`` of the candidate's critical cases (what a sign-off binds)."""
        return {r.case.id: r.tenant for r in self.candidate.records if r.case.critical}

    def tested_failures(self) -> list[str]:
        """Every failure but missing review: what the runs themselves showed."""
        run, metrics = self.candidate, self.candidate.metrics()
        out = []
        for name, flag in (
            ("approval_bypasses", lambda s: s.approval_bypass),
            ("cross_tenant_access", lambda s: s.cross_tenant_access),
            ("duplicate_effects", lambda s: s.duplicate_effects > 0),
            ("dangerous_false_positives", lambda s: s.dangerous),
            ("critical_failed", lambda s: s.critical and not s.passed),
        ):
            ids = run.cases_where(flag)
            if ids:
                out.append(f"{name}={metrics[name]} cases={','.join(ids)}")
        if self.derived:
            loose = self.loosened()
            if loose:
                out.append(f"loosened={len(loose)} cases={','.join(sorted(loose))}")
            unsafe = self.unsafe_derived()
            if unsafe:
                out.append(f"derived_unsafe={len(unsafe)} cases={','.join(sorted(unsafe))}")
            missing = uncovered(self.coverage_table()) if self.check_coverage else []
            if missing:
                out.append(f"uncovered={len(missing)} targets={','.join(missing)}")
        if run.facts.manifest_status != "verified":
            out.append(f"candidate_manifest={run.facts.manifest_status} (irreproducible release)")
        if self.control is not None:
            baseline = self.control.metrics()
            for name in QUALITY:
                mine, theirs = metrics[name], baseline[name]
                if mine is not None and theirs is not None and mine < theirs:
                    out.append(f"{name}={mine}% below control {theirs}%")
            out.extend(self.cost_failures())
        return out

    def cost_failures(self) -> list[str]:
        """Each per-task cost (`COST_METRICS`) more than its limit worse than the control's, on
        the cases both releases ran; the limits are the stricter of the two releases' policies."""
        if self.control is None:
            return []
        shared = {r.case.id for r in self.candidate.records} & {r.case.id for r in self.control.records}
        if not shared:
            return []
        limits = self.candidate.facts.cost_limits.stricter(self.control.facts.cost_limits)
        mine, theirs = self.candidate.cost_per_task(shared), self.control.cost_per_task(shared)
        out = []
        for metric in COST_METRICS:
            percent = limits.percent(metric)
            if over_limit(mine[metric], theirs[metric], percent):
                change = (
                    f"+{100 * (mine[metric] / theirs[metric] - 1):.1f}%" if theirs[metric] else "from zero"
                )
                out.append(
                    f"{metric}={mine[metric]} over control {theirs[metric]} ({change}, limit +{percent:g}%)"
                    f" cases={len(shared)}"
                )
        return out

    @property
    def passed(self) -> bool:
        """True when nothing fails the gate."""
        return not self.failures()


def evaluate_gate(
    dataset: Dataset,
    candidate: str | Release,
    control: str | Release | None = None,
    *,
    critical_only: bool = False,
    derived: bool = True,
    progress: Callable[[str], None] | None = None,
    model: EvalModel | None = None,
) -> GateResult:
    """Run ``dataset`` on the candidate (and the control, when given), both with ``model``, and,
    unless ``derived`` is off, the cases generated from both releases' declarations."""
    cases = [c for c in dataset.cases if c.critical or not critical_only]
    with ExitStack() as stack:
        mine = stack.enter_context(CaseRunner(candidate, cases=cases))
        theirs = stack.enter_context(CaseRunner(control, cases=cases)) if control is not None else None
        problems: list[str] = []
        generated = (
            derived_cases(dataset, [r for r in (mine, theirs) if r is not None], problems) if derived else []
        )
        candidate_run = run_on(mine, cases, generated, progress=progress, model=model)
        control_run = (
            run_on(theirs, cases, generated, skip_inapplicable=True, progress=progress, model=model)
            if theirs is not None
            else None
        )
    return GateResult(
        dataset=dataset,
        candidate=candidate_run,
        control=control_run,
        derived=generated,
        derive_problems=list(dict.fromkeys(problems)),  # each release derives: one line each
    )


def derived_cases(
    dataset: Dataset, runners: Sequence[CaseRunner], problems: list[str] | None = None
) -> list[DerivedCase]:
    """The cases the declarations of every runner's release give, seeded by ``dataset``
    (``problems``: why a declaration gave none, see `toolgate.evals.derived_cases.derive`)."""
    people = {}
    for runner in runners:
        people.update(runner.people)
    seeds = seeds_of(dataset.cases, people)
    declarations = [Declarations.of(r.release, r.registry) for r in runners]
    roles = union_roles(declarations, dataset_people(dataset.cases, people))
    return merge(*(derive(one, seeds, roles, problems) for one in declarations))


def dataset_people(cases: Sequence[EvalCase], known: Mapping[str, Principal]) -> list[Principal]:
    """Everyone ``cases`` act as or name as reviewers: known people, inline principals and each
    case's own people (repeats included: only their roles matter)."""
    found: list[Principal] = []
    for case in cases:
        own = {str(p["user_id"]): Principal.from_dict(p) for p in case.people}
        found += own.values()
        for name in [case.principal, *(step.reviewer for step in case.approvals)]:
            person = Principal.from_dict(name) if isinstance(name, dict) else own.get(name) or known.get(name)
            if person is not None:
                found.append(person)
    return found


@dataclass(frozen=True)
class CriticalResult:
    """The critical fixtures of a dataset run against one release (rollback smoke checks)."""

    passed: int
    total: int
    """Critical cases run (those applicable to the release)."""
    failed: list[str]
    """Ids of the critical cases that failed."""
    skipped: list[str] = field(default_factory=list)
    """Critical cases not applicable to the release (it lacks a tool they require)."""
    reasons: dict[str, list[str]] = field(default_factory=dict)
    """Why each failed case failed (`CaseScore.reasons`), so a refused rollback says what broke."""

    @property
    def ok(self) -> bool:
        """Every critical case passed (and there was at least one)."""
        return self.total > 0 and not self.failed


def run_critical(release_id: str, dataset: Path | None = None) -> CriticalResult:
    """Run the critical cases of ``dataset`` (default: the packaged tool-calling-v1) on ``release_id``.

    Cases that need a tool the release lacks are skipped (``skipped``): a rollback target may
    predate them."""
    data = load_dataset(dataset or DEFAULT_DATASET)
    run = run_release(release_id, [c for c in data.cases if c.critical], skip_inapplicable=True)
    failing = [r for r in run.records if not r.score.passed]
    return CriticalResult(
        passed=len(run.records) - len(failing),
        total=len(run.records),
        failed=[r.case.id for r in failing],
        skipped=run.skipped,
        reasons={r.case.id: list(r.score.reasons) for r in failing},
    )


__all__ = [
    "QUALITY",
    "CaseRecord",
    "CriticalResult",
    "DerivedRun",
    "GateResult",
    "ReleaseRun",
    "dataset_people",
    "derived_cases",
    "evaluate_gate",
    "run_critical",
    "run_on",
    "run_release",
]
