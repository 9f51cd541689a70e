"""Tools offered per request, and whether the right one is among them, on a 40-tool catalog.

The eval dataset's cases with an expected tool run as requests against the release-like catalog
of `toolgate.evals.catalog_wide` (the demo's 12 tools and 28 distractor reads), first offering
every tool the case's principal may see (the full catalog, as before issue 16), then at most
``TOOLGATE_MAX_TOOLS_PER_REQUEST`` (8) chosen by `toolgate.policy.tool_selection`. Reported side
by side: tools offered per request (max, mean), recall of the expected tool in the offer, and the
accuracy of a deterministic lexical chooser over the offer (`toolgate.evals.selection_measure`:
name and description word overlap; not a model). No model, no network, no handler runs.

Writes ``bench/results/tool_selection.json`` and prints one line per catalog setting.
Run: ``.venv/bin/python bench/tool_selection.py``
"""

from __future__ import annotations

import json
import secrets
import tempfile
from pathlib import Path
from typing import Any

from toolgate.evals.catalog_wide import wide_catalog
from toolgate.evals.selection_measure import Figures, measure, selection_cases
from toolgate.policy.tool_selection import DEFAULT_MAX_TOOLS
from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import SQLiteStore

RESULTS = Path(__file__).parent / "results" / "tool_selection.json"


def run(limit: int = DEFAULT_MAX_TOOLS) -> list[Figures]:
    """Full catalog, then selection, over the dataset's cases with an expected tool."""
    cases = selection_cases()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.sqlite", key=secrets.token_bytes(32))
        try:
            registry = wide_catalog(ReleaseEnv(store=store, secret=secrets.token_bytes(32)))
            return [
                measure(registry, cases, catalog="full", limit=None),
                measure(registry, cases, catalog=f"selected_max{limit}", limit=limit),
            ]
        finally:
            store.close()


def main() -> None:
    figures = run()
    result: dict[str, Any] = {
        "catalog": "demo 12 tools + 28 distractor reads (toolgate.evals.catalog_wide)",
        "chooser": "lexical: request words in the tool's name (2 each) and description (1 each); not a model",
        "recall_over": "cases whose principal may see the expected tool",
        "settings": [f.to_dict() for f in figures],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for f in figures:
        print(f.line())


if __name__ == "__main__":
    main()
