"""The shape of the source tree, for reviewing a restructuring (issue 26): modules and lines per
folder, how many modules are small, the largest, and every module-level import cycle, counting
imports inside functions and ``if TYPE_CHECKING:`` blocks too (a cycle hidden behind a deferred
import is still two modules that cannot be read apart).

It reads source with `ast` through the import-graph test's scanner, so it never imports the package.

    python scripts/tree_stats.py            # markdown to stdout
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import test_import_graph as layout  # noqa: E402  (the scanner lives beside the rules it serves)

SMALL = 40


def module_cycles() -> list[list[str]]:
    """Strongly connected groups of modules, every import counted (the import-graph test's rule (e))."""
    return layout.strongly_connected(layout.module_graph())


def main() -> None:
    modules, _ = layout.scan()
    per_folder: dict[str, list[layout.Module]] = defaultdict(list)
    for module in modules.values():
        per_folder[str(module.path.parent)].append(module)
    total_lines = sum(m.lines for m in modules.values())
    print(
        f"modules: {len(modules)}  lines: {total_lines}  "
        f"under {SMALL} lines: {sum(m.lines < SMALL for m in modules.values())}  "
        f"200-300 lines: {sum(200 <= m.lines <= 300 for m in modules.values())}"
    )
    print("\n| folder | modules | lines | under 40 |\n|---|---:|---:|---:|")
    for folder in sorted(per_folder):
        group = per_folder[folder]
        print(
            f"| {folder} | {len(group)} | {sum(m.lines for m in group)} | "
            f"{sum(m.lines < SMALL for m in group)} |"
        )
    print("\nlargest:")
    for module in sorted(modules.values(), key=lambda m: -m.lines)[:8]:
        print(f"  {module.lines:5d}  {module.path}")
    cycles = module_cycles()
    print(f"\nmodule cycles (every import, deferred and type-only included): {len(cycles)}")
    for component in cycles:
        print("  " + " <-> ".join(component))


if __name__ == "__main__":
    main()
