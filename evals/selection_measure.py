"""Tool selection measured on the eval dataset: the full catalog against the selected tools.

Every dataset case with an expected tool (the first call its task needs) is a request: its
principal, its input. For each case and catalog setting the measurement records how many tools
the request offers, whether the expected tool is among them (recall, over the cases whose
principal may see that tool at all: a case about an unauthorized call expects a tool that is
never offered, by design), and what a deterministic **lexical chooser** picks among the offered
tools. The chooser is not a model: it scores each offered tool by the request's words found in
the tool's name (2 each) and description (1 each) and takes the best (ties: first by name). It
stands in for a model's choice to show how a wider offer dilutes a choice made from names and
descriptions alone; it is no claim about any provider model's accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from toolgate.evals.dataset.build import build_cases
from toolgate.evals.fixtures import EvalCase
from toolgate.policy.principal import Principal
from toolgate.policy.tool_selection import Conversation, profile, select_tools, words
from toolgate.tools.demo.identities import demo_principals
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ToolSpec


@dataclass
class Figures:
    """One catalog setting's figures over the cases."""

    catalog: str
    tools: int
    cases: int = 0
    offered_max: int = 0
    offered_mean: float = 0.0
    recall_cases: int = 0
    """Cases whose principal may see the expected tool."""
    recall_hits: int = 0
    chooser_hits: int = 0
    missed: list[str] = field(default_factory=list)
    """Ids of cases whose expected (visible) tool was not offered."""

    @property
    def recall(self) -> float:
        return self.recall_hits / self.recall_cases if self.recall_cases else 1.0

    @property
    def chooser_accuracy(self) -> float:
        return self.chooser_hits / self.recall_cases if self.recall_cases else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "recall": self.recall, "chooser_accuracy": self.chooser_accuracy}

    def line(self) -> str:
        """One line per catalog setting (the bench prints it)."""
        return (
            f"catalog={self.catalog} tools={self.tools} cases={self.cases} offered_max={self.offered_max} "
            f"offered_mean={self.offered_mean:.1f} recall={self.recall:.1%} "
            f"({self.recall_hits}/{self.recall_cases}) chooser=lexical "
            f"chooser_accuracy={self.chooser_accuracy:.1%} ({self.chooser_hits}/{self.recall_cases})"
        )


def selection_cases() -> list[EvalCase]:
    """The dataset's cases that name an expected tool."""
    return [case for case in build_cases() if case.expected.tool]


def principal_of(case: EvalCase) -> Principal:
    """The case's principal (one of the case's own people, a demo identity by user id, or inline)."""
    own = {str(p["user_id"]): p for p in case.people}
    if isinstance(case.principal, str) and case.principal in own:
        return Principal.from_dict(own[case.principal])
    if isinstance(case.principal, str):
        return demo_principals()[case.principal]
    return Principal.from_dict(case.principal)


def lexical_choice(offered: Sequence[ToolSpec], request: str) -> str | None:
    """The lexical chooser's pick among ``offered`` (see the module doc)."""
    asked = words(request)
    best: tuple[int, str] | None = None
    for spec in sorted(offered, key=lambda s: s.name):
        p = profile(spec)
        points = 2 * len(p.name_words & asked) + len(p.description_words & asked)
        if best is None or points > best[0]:
            best = (points, spec.name)
    return best[1] if best else None


def measure(registry: Registry, cases: Sequence[EvalCase], *, catalog: str, limit: int | None) -> Figures:
    """Figures for ``registry`` offering everything visible (``limit`` None) or at most ``limit``."""
    figures = Figures(catalog=catalog, tools=len(registry.tools))
    sizes: list[int] = []
    for case in cases:
        principal = principal_of(case)
        visible, offered = select_tools(
            registry, principal, Conversation(request=case.input), limit or len(registry.tools), now=None
        )
        sizes.append(len(offered))
        figures.cases += 1
        if case.expected.tool not in {s.name for s in visible}:
            continue
        figures.recall_cases += 1
        if case.expected.tool in {s.name for s in offered}:
            figures.recall_hits += 1
        else:
            figures.missed.append(case.id)
        if lexical_choice(offered, case.input) == case.expected.tool:
            figures.chooser_hits += 1
    figures.offered_max = max(sizes, default=0)
    figures.offered_mean = sum(sizes) / len(sizes) if sizes else 0.0
    return figures


__all__ = ["Figures", "lexical_choice", "measure", "principal_of", "selection_cases"]
