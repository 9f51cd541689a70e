"""The order the suite's files start in: the slowest first (scripts/run-tests.sh).

pytest-xdist (``--dist loadfile``) hands whole files to its workers in collection order, each
worker taking the next file as it frees up. A long file that starts late runs alone at the end
while the other workers have nothing left to do; started first, it runs beside the many short
files, which then fill the other workers to the end (longest first). xdist's own order (files
with the most tests first) is switched off there (``--no-loadscope-reorder``) so that this one
holds.

`SLOWEST` names the files that took longest in a whole run (`make test`; ``python
scripts/suite_profile.py .build/test-durations.txt`` prints the slowest files), slowest first.
Every other file keeps its place after them, and the tests of a file keep theirs. A stale or
missing entry only moves a file in the queue: every test still runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

SLOWEST: tuple[str, ...] = (
    "test_server_tampering.py",  # 76 s
    "test_mcp_drift.py",  # 53 s
    "test_gate_mutation_demo_wide.py",  # 52 s
    "test_evals_capture.py",  # 51 s
    "test_evals_gate.py",  # 48 s
    "test_clock_skew.py",  # 44 s
    "test_worker_run.py",  # 42 s
    "test_hostile_input.py",  # 40 s
    "test_records_confinement.py",  # 39 s
    "test_state_tampering.py",  # 38 s
    "test_readme_commands.py",  # 38 s
    "test_mcp_serve.py",  # 35 s
    "test_release_control_cli.py",  # 35 s
    "test_verify.py",  # 34 s
    "test_gate_derived.py",  # 34 s
    "test_multiprocess.py",  # 32 s
    "test_store_contract.py",  # 32 s
    "test_reconcile_delegation.py",  # 31 s
    "test_release_evidence.py",  # 30 s
    "test_gate_mutation_demo.py",  # 29 s
    "test_audit_access.py",  # 26 s
    "test_console_browser.py",  # 26 s
    "test_shared_breaker.py",  # 26 s
    "test_public_corpus.py",  # 25 s
    "test_server_resume_shapes.py",  # 25 s
    "test_evals_review.py",  # 23 s
    "test_demo_tools.py",  # 21 s
)
"""File names (``test_x.py``), slowest first, with each file's seconds (setup, call and teardown of
all its tests) in CI's run of the whole suite on c2e7394, on 2 quiet cores (load under 3); the list
runs down to files of about 20 s."""


def slowest_first(items: list[pytest.Item], slowest: Sequence[str] = SLOWEST) -> None:
    """Reorder ``items`` in place: the files of ``slowest`` first, in its order; a stable sort,
    so every other file and the tests inside each file keep their order."""
    rank = {name: place for place, name in enumerate(slowest)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
