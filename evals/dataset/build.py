"""Generates the packaged dataset ``evals/datasets/tool-calling-v1.jsonl``, deterministically.

The cases are code (the ``toolgate.evals.dataset_cases_*`` modules) so that
a reviewer reads intent, not JSON; the committed JSONL is their rendering, and a test checks the two
agree. After changing a case::

    python -m toolgate.evals.dataset.build          # rewrite the file
    python -m toolgate.evals.dataset.build --check  # exit 1 if the file is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

from toolgate.evals.dataset.approvals import approval_bypass
from toolgate.evals.dataset.arguments import argument_extraction
from toolgate.evals.dataset.batches import parallel_partial_results
from toolgate.evals.dataset.budgets import loops_and_budgets
from toolgate.evals.dataset.delivery import duplicate_delivery, unknown_outcome
from toolgate.evals.dataset.injection import prompt_injection_in_tool_output
from toolgate.evals.dataset.refusal import refusal
from toolgate.evals.dataset.selection import no_tool, tool_selection
from toolgate.evals.dataset.tenancy import cross_tenant, cross_user
from toolgate.evals.fixtures import DEFAULT_DATASET, EvalCase, dump_cases

BUILDERS = (
    tool_selection,
    no_tool,
    argument_extraction,
    cross_tenant,
    cross_user,
    prompt_injection_in_tool_output,
    refusal,
    approval_bypass,
    duplicate_delivery,
    parallel_partial_results,
    unknown_outcome,
    loops_and_budgets,
)
"""One builder per category, in the dataset's order."""


def build_cases() -> list[EvalCase]:
    """Every case of tool-calling-v1, in order."""
    return [case for builder in BUILDERS for case in builder()]


def render() -> str:
    """The JSONL text of the dataset."""
    return dump_cases(build_cases())


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check``, compare) the packaged dataset."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    path = Path(DEFAULT_DATASET)
    if "--check" in args:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is stale: run python -m toolgate.evals.dataset.build", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path} cases={text.count(chr(10))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["BUILDERS", "build_cases", "main", "render"]
