"""The gate tests itself: every single-point loosening of a release must fail it.

`mutate` first runs the whole gate of the release against itself (the dataset and every case
derived from its declarations): it must pass with nothing uncovered, or no score means anything.
Then, for each `toolgate.evals.mutants.Mutant`, it runs the gate with the loosened release as the
candidate and the release itself as the control, and records whether the gate failed (*killed*,
with the failures that killed it) or passed (*survived*: a loosening the gate cannot see).

Each mutant is run first on the generated cases written to probe its kind of loosening
(`toolgate.evals.mutants.PROBED_BY`, e.g. ``scope`` cases for a dropped scope), derived from the
mutant's declarations as well as the release's and naming a tool it changed: the claim under
test is that these alone catch it. Only a mutant they miss is run again on every case that can
observe it: the dataset cases and generated cases naming one of the tools it changed, or, for a
loosening of no one tool (rate-limit windows, the approval window), the generated cases of the
families that probe it. Choosing fewer cases can only let a mutant survive, never kill it (the
gate's failures only grow with its cases), so the score errs toward reporting a gap. The
control's runs are shared by every mutant (one run per case).

The mutation score is killed / (killed + survived); mutants the registry refuses to load are
listed apart (a loosening nobody can ship), and so are equivalent ones: a loosening no call can
tell from the release (a rule's limit raised past what the tool's schema already refuses).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from toolgate.evals.derived_cases import DerivedCase, Seed, derive, merge, seeds_of
from toolgate.evals.fixtures import Dataset, EvalCase
from toolgate.evals.gate import CaseRecord, DerivedRun, GateResult, ReleaseRun, dataset_people, run_on
from toolgate.evals.gate_targets import Declarations, union_roles
from toolgate.evals.mutants import PROBED_BY, Mutant, loads, mutants_of
from toolgate.evals.runner import CaseRunner
from toolgate.releases.bundle import Release
from toolgate.releases.loader import load_release

Status = Literal["killed", "survived", "refused_at_load", "equivalent"]


@dataclass
class MutantResult:
    """What the gate made of one mutant."""

    mutant: Mutant
    status: Status
    reasons: list[str] = field(default_factory=list)
    """The gate's failures (killed), or why it could not load (refused_at_load)."""
    cases: int = 0
    """Cases run against it."""
    seconds: float = 0.0


@dataclass
class MutationReport:
    """The base gate and every mutant's verdict."""

    release: str
    base_failures: list[str]
    """Why the release failed the gate against itself (empty: it passed)."""
    results: list[MutantResult] = field(default_factory=list)

    @property
    def killed(self) -> list[MutantResult]:
        """Mutants the gate failed."""
        return [r for r in self.results if r.status == "killed"]

    @property
    def survived(self) -> list[MutantResult]:
        """Mutants the gate passed: loosenings it cannot see."""
        return [r for r in self.results if r.status == "survived"]

    @property
    def score(self) -> float:
        """Killed out of the mutants that loaded, in percent (0 when none loaded)."""
        counted = len(self.killed) + len(self.survived)
        return round(100.0 * len(self.killed) / counted, 1) if counted else 0.0

    def kinds(self) -> dict[str, tuple[int, int]]:
        """Per mutant kind: (killed, loaded)."""
        out: dict[str, tuple[int, int]] = {}
        for r in self.results:
            if r.status not in ("killed", "survived"):
                continue
            killed, total = out.get(r.mutant.kind, (0, 0))
            out[r.mutant.kind] = (killed + (r.status == "killed"), total + 1)
        return dict(sorted(out.items()))


class _Control:
    """The release under test as every mutant's control: each case run on it once."""

    def __init__(self, runner: CaseRunner) -> None:
        self.runner = runner
        self.records: dict[str, CaseRecord] = {}
        self.derived: dict[str, DerivedRun] = {}

    def run(self, cases: Sequence[EvalCase], derived: Sequence[DerivedCase]) -> ReleaseRun:
        """A run of ``cases`` and ``derived`` on the control, reusing every earlier run."""
        fresh = run_on(
            self.runner,
            [c for c in cases if c.id not in self.records],
            [d for d in derived if d.id not in self.derived],
            skip_inapplicable=True,
        )
        self.records.update({r.case.id: r for r in fresh.records})
        self.derived.update(fresh.derived)
        return ReleaseRun(
            facts=self.runner.facts,
            records=[self.records[c.id] for c in cases if c.id in self.records],
            derived={d.id: self.derived[d.id] for d in derived if d.id in self.derived},
            declarations=Declarations.of(self.runner.release, self.runner.registry),
        )


def mutate(
    release: str | Release,
    dataset: Dataset,
    *,
    only: Callable[[Mutant], bool] | None = None,
    progress: Callable[[MutantResult], None] | None = None,
) -> MutationReport:
    """Run the gate of ``release`` against itself, then against each of its single-point
    loosenings (``only``: a filter on the mutants), on ``dataset`` and the derived cases."""
    base = load_release(release) if isinstance(release, str) else release
    cases = list(dataset.cases)
    with CaseRunner(base, cases=cases) as runner:
        control = _Control(runner)
        declarations = Declarations.of(base, runner.registry)
        roles = union_roles([declarations], dataset_people(cases, runner.people))
        seeds = seeds_of(cases, runner.people)
        own = derive(declarations, seeds, roles)
        whole = control.run(cases, own)
        base_gate = GateResult(dataset=dataset, candidate=whole, control=whole, derived=own)
        report = MutationReport(base.id, base_gate.tested_failures())
        if report.base_failures:
            return report
        for number, mutant in enumerate(mutants_of(declarations, roles), start=1):
            if only is not None and not only(mutant):
                continue
            result = _score(mutant, number, base, dataset, control, seeds, roles, own)
            report.results.append(result)
            if progress is not None:
                progress(result)
    return report


def _score(
    mutant: Mutant,
    number: int,
    base: Release,
    dataset: Dataset,
    control: _Control,
    seeds: dict[str, list[Seed]],
    roles: frozenset[str],
    own: Sequence[DerivedCase],
) -> MutantResult:
    started = time.perf_counter()
    if mutant.equivalent is not None:
        return MutantResult(mutant, "equivalent", [mutant.equivalent])
    loaded = loads(mutant, base, number)
    if isinstance(loaded, str):
        return MutantResult(mutant, "refused_at_load", [loaded])
    every = [c for c in dataset.cases if _observes(mutant, c.requires, None)]
    with CaseRunner(loaded, cases=every, like=control.runner) as runner:
        theirs = derive(Declarations.of(loaded, runner.registry), seeds, roles)
        observing = [d for d in merge(theirs, own) if _observes(mutant, d.case.requires, d.family)]
        probes = PROBED_BY.get(mutant.kind, frozenset())
        first = [d for d in observing if d.family in probes]
        failures, ran = _gate(runner, control, dataset, [], first)
        if not failures:  # the probes written for it missed: every case that can observe it
            failures, more = _gate(runner, control, dataset, every, observing)
            ran += more
    return MutantResult(
        mutant,
        "killed" if failures else "survived",
        failures,
        cases=ran,
        seconds=round(time.perf_counter() - started, 2),
    )


def _gate(
    runner: CaseRunner,
    control: _Control,
    dataset: Dataset,
    cases: Sequence[EvalCase],
    derived: Sequence[DerivedCase],
) -> tuple[list[str], int]:
    """The gate's failures with ``runner``'s release as candidate, on ``cases`` and ``derived``
    (coverage is the whole gate's business, asked of the release itself), and how many ran."""
    candidate = run_on(runner, cases, derived)
    subset = Dataset(path=dataset.path, cases=tuple(cases), sha256=dataset.sha256)
    result = GateResult(
        dataset=subset,
        candidate=candidate,
        control=control.run(cases, derived),
        derived=list(derived),
        check_coverage=False,
    )
    return result.tested_failures(), len(candidate.records) + len(candidate.derived)


def _observes(mutant: Mutant, requires: Sequence[str], family: str | None) -> bool:
    """Whether a case requiring ``requires`` (of ``family``, for a generated one) can observe ``mutant``."""
    if mutant.tools is not None:
        return bool(mutant.tools & set(requires))
    return family is not None and mutant.families is not None and family in mutant.families


__all__ = ["MutantResult", "MutationReport", "mutate"]
